// Small checked collectives.
#include "comm/collectives.hpp"

#include "comm/alltoallv.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &r));
  return r;
}

int size_of(MPI_Comm comm) {
  int s = 1;
  MPI_CHECK(MPI_Comm_size(comm, &s));
  return s;
}

void allreduce_sum(std::vector<int64_t>& v, MPI_Comm comm) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_INT64_T, MPI_SUM, comm));
}

int64_t allreduce_max(int64_t value, MPI_Comm comm) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MAX, comm));
  return value;
}

int64_t allreduce_min(int64_t value, MPI_Comm comm) {
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_MIN, comm));
  return value;
}

void reduce_sum_to_root(std::vector<int64_t>& v, MPI_Comm comm) {
  if (rank_of(comm) == 0) MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_INT64_T, MPI_SUM, 0, comm));
  else MPI_CHECK(MPI_Reduce(v.data(), nullptr, static_cast<int>(v.size()), MPI_INT64_T, MPI_SUM, 0, comm));
}

void reduce_max_to_root(std::vector<double>& v, MPI_Comm comm) {
  if (rank_of(comm) == 0) MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, 0, comm));
  else MPI_CHECK(MPI_Reduce(v.data(), nullptr, static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, 0, comm));
}

void reduce_sum_to_root(std::vector<double>& v, MPI_Comm comm) {
  if (rank_of(comm) == 0) MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, 0, comm));
  else MPI_CHECK(MPI_Reduce(v.data(), nullptr, static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, 0, comm));
}

void barrier(MPI_Comm comm) { MPI_CHECK(MPI_Barrier(comm)); }

void idle_barrier(MPI_Comm comm) {
  std::vector<MPI_Request> req(1);
  MPI_CHECK(MPI_Ibarrier(comm, &req[0]));
  wait_with_timeout(req, {-1}, 0, rank_of(comm), "barrier");
}

std::string broadcast_string(const std::string& value, MPI_Comm comm) {
  int64_t n = static_cast<int64_t>(value.size());
  MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm));
  std::string out = value;
  out.resize(static_cast<std::size_t>(n));
  MPI_CHECK(MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, 0, comm));
  return out;
}

}  // namespace moerun::comm

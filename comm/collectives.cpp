// Small checked collectives.
#include "comm/collectives.hpp"

#include <algorithm>

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

void allreduce_sum_timed(std::vector<int64_t>& v, MPI_Comm comm, double timeout_s, const std::string& what) {
  constexpr int kTag = 77;
  const int rank = rank_of(comm), size = size_of(comm);
  const int n = static_cast<int>(v.size());
  if (rank == 0) {
    std::vector<int64_t> all(static_cast<std::size_t>(n) * static_cast<std::size_t>(size));
    std::vector<MPI_Request> reqs;
    std::vector<int> peers;
    for (int p = 1; p < size; ++p) {
      reqs.emplace_back();
      peers.push_back(p);
      MPI_CHECK(MPI_Irecv(all.data() + static_cast<std::size_t>(p) * n, n, MPI_INT64_T, p, kTag, comm, &reqs.back()));
    }
    wait_with_timeout(reqs, peers, timeout_s, rank, what);
    for (int p = 1; p < size; ++p)
      for (int i = 0; i < n; ++i) v[i] += all[static_cast<std::size_t>(p) * n + i];
    reqs.clear();
    peers.clear();
    for (int p = 1; p < size; ++p) {
      reqs.emplace_back();
      peers.push_back(p);
      MPI_CHECK(MPI_Isend(v.data(), n, MPI_INT64_T, p, kTag, comm, &reqs.back()));
    }
    wait_with_timeout(reqs, peers, timeout_s, rank, what);
  } else {
    std::vector<MPI_Request> reqs(2);
    MPI_CHECK(MPI_Isend(v.data(), n, MPI_INT64_T, 0, kTag, comm, &reqs[0]));
    std::vector<int64_t> sum(v.size());
    MPI_CHECK(MPI_Irecv(sum.data(), n, MPI_INT64_T, 0, kTag, comm, &reqs[1]));
    // A little longer than rank 0, so that when a third rank stalls, rank 0 names it first.
    wait_with_timeout(reqs, {0, 0}, timeout_s + 1.0, rank, what, 0);
    v = sum;
  }
}

std::vector<int64_t> allgather_timed(const std::vector<int64_t>& v, MPI_Comm comm, double timeout_s, const std::string& what) {
  std::vector<int64_t> all(v.size() * static_cast<std::size_t>(size_of(comm)));
  std::vector<MPI_Request> req(1);
  MPI_CHECK(MPI_Iallgather(v.data(), static_cast<int>(v.size()), MPI_INT64_T, all.data(), static_cast<int>(v.size()), MPI_INT64_T, comm,
                           &req[0]));
  wait_with_timeout(req, {-1}, timeout_s, rank_of(comm), what);
  return all;
}

void allreduce_max_timed(std::vector<int64_t>& v, MPI_Comm comm, double timeout_s, const std::string& what) {
  std::vector<MPI_Request> req(1);
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_INT64_T, MPI_MAX, comm, &req[0]));
  wait_with_timeout(req, {-1}, timeout_s, rank_of(comm), what);
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
  if (rank_of(comm) == 0)
    MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_INT64_T, MPI_SUM, 0, comm));
  else
    MPI_CHECK(MPI_Reduce(v.data(), nullptr, static_cast<int>(v.size()), MPI_INT64_T, MPI_SUM, 0, comm));
}

void reduce_max_to_root(std::vector<double>& v, MPI_Comm comm) {
  if (rank_of(comm) == 0)
    MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, 0, comm));
  else
    MPI_CHECK(MPI_Reduce(v.data(), nullptr, static_cast<int>(v.size()), MPI_DOUBLE, MPI_MAX, 0, comm));
}

void reduce_sum_to_root(std::vector<double>& v, MPI_Comm comm) {
  if (rank_of(comm) == 0)
    MPI_CHECK(MPI_Reduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, 0, comm));
  else
    MPI_CHECK(MPI_Reduce(v.data(), nullptr, static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, 0, comm));
}

std::vector<double> gather_to_root(const std::vector<double>& v, MPI_Comm comm) {
  std::vector<double> out(rank_of(comm) == 0 ? v.size() * static_cast<std::size_t>(size_of(comm)) : 0);
  MPI_CHECK(MPI_Gather(v.data(), static_cast<int>(v.size()), MPI_DOUBLE, out.data(), static_cast<int>(v.size()), MPI_DOUBLE, 0, comm));
  return out;
}

void barrier(MPI_Comm comm) {
  MPI_CHECK(MPI_Barrier(comm));
}

void idle_barrier(MPI_Comm comm) {
  std::vector<MPI_Request> req(1);
  MPI_CHECK(MPI_Ibarrier(comm, &req[0]));
  wait_with_timeout(req, {-1}, 0, rank_of(comm), "barrier");
}

void barrier_timed(MPI_Comm comm, double timeout_s, const std::string& what) {
  std::vector<int64_t> none(1, 0);
  allreduce_sum_timed(none, comm, timeout_s, what);
}

std::string broadcast_string_timed(const std::string& value, MPI_Comm comm, double timeout_s, const std::string& what) {
  constexpr int kTag = 78;
  constexpr int64_t kPiece = int64_t{1} << 30;  // MPI counts are int
  const int rank = rank_of(comm), size = size_of(comm);
  std::vector<int64_t> n(1, rank == 0 ? static_cast<int64_t>(value.size()) : 0);
  allreduce_sum_timed(n, comm, timeout_s, what);  // rank 0's size, and everyone has arrived
  std::string out = rank == 0 ? value : std::string(static_cast<std::size_t>(n[0]), '\0');
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  for (int64_t off = 0; off < n[0]; off += kPiece) {
    const int count = static_cast<int>(std::min(kPiece, n[0] - off));
    for (int p = rank == 0 ? 1 : 0; p < (rank == 0 ? size : 1); ++p) {
      reqs.emplace_back();
      peers.push_back(p);
      if (rank == 0)
        MPI_CHECK(MPI_Isend(out.data() + off, count, MPI_CHAR, p, kTag, comm, &reqs.back()));
      else
        MPI_CHECK(MPI_Irecv(out.data() + off, count, MPI_CHAR, 0, kTag, comm, &reqs.back()));
    }
  }
  wait_with_timeout(reqs, peers, rank == 0 ? timeout_s : timeout_s + 1.0, rank, what);
  return out;
}

FailureAgreement agree_on_failure(int64_t code, bool has_message, MPI_Comm comm, double timeout_s, const std::string& what) {
  const int rank = rank_of(comm), size = size_of(comm);
  // One slot per rank (a sum of vectors that are zero elsewhere is every rank's value): a few
  // KiB even for thousands of ranks, and it goes through the timed reduction.
  std::vector<int64_t> slots(static_cast<std::size_t>(size), 0);
  slots[static_cast<std::size_t>(rank)] = code * 2 + (has_message ? 1 : 0);
  allreduce_sum_timed(slots, comm, timeout_s, what);
  FailureAgreement a;
  for (int r = 0; r < size; ++r) {
    const int64_t c = slots[static_cast<std::size_t>(r)] / 2;
    a.code = std::max(a.code, c);
    if (a.reporter < 0 && c != 0 && slots[static_cast<std::size_t>(r)] % 2 == 1) {
      a.reporter = r;
      a.reporter_code = c;
    }
  }
  return a;
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

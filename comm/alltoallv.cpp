// MPI_Alltoallv exchange. Counts travel as int64; payloads as bytes with int displacements, so
// one exchange is limited to 2 GiB per peer (far above what a layer's rows need).
#include "comm/alltoallv.hpp"

#include <limits>

#include "base/error.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {

MpiAllToAllV::MpiAllToAllV(MPI_Comm comm) : comm_(comm) { MPI_CHECK(MPI_Comm_size(comm, &size_)); }

void MpiAllToAllV::exchange(const void* send, const std::vector<int64_t>& send_counts, std::size_t elem_size,
                            std::vector<char>& recv, std::vector<int64_t>& recv_counts) {
  recv_counts.assign(static_cast<std::size_t>(size_), 0);
  MPI_CHECK(MPI_Alltoall(send_counts.data(), 1, MPI_INT64_T, recv_counts.data(), 1, MPI_INT64_T, comm_));
  int64_t total = 0;
  for (auto c : recv_counts) total += c;
  recv.resize(static_cast<std::size_t>(total) * elem_size);
  exchange_known(send, send_counts, elem_size, recv.data(), recv_counts);
}

void MpiAllToAllV::exchange_known(const void* send, const std::vector<int64_t>& send_counts, std::size_t elem_size,
                                  void* recv, const std::vector<int64_t>& recv_counts) {
  std::vector<int> sc(static_cast<std::size_t>(size_)), sd(sc.size()), rc(sc.size()), rd(sc.size());
  int64_t so = 0, ro = 0;
  for (int p = 0; p < size_; ++p) {
    const int64_t sb = send_counts[p] * static_cast<int64_t>(elem_size), rb = recv_counts[p] * static_cast<int64_t>(elem_size);
    if (so + sb > std::numeric_limits<int>::max() || ro + rb > std::numeric_limits<int>::max())
      fail(ErrorKind::Comm, "all-to-all payload over 2 GiB; use smaller --max-batch-tokens");
    sc[p] = static_cast<int>(sb);
    sd[p] = static_cast<int>(so);
    rc[p] = static_cast<int>(rb);
    rd[p] = static_cast<int>(ro);
    so += sb;
    ro += rb;
  }
  MPI_CHECK(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, comm_));
}

}  // namespace moerun::comm

// AllToAllV: the exchange interface of DESIGN §4 — counts first, then payload — between router
// and expert ranks. `MpiAllToAllV` is the MPI_Alltoallv baseline (always available, the reference
// in tests); the hierarchical implementation plugs in behind the same interface.
#pragma once
#include <cstdint>
#include <vector>

#include <mpi.h>

namespace moerun::comm {

class AllToAllV {
 public:
  virtual ~AllToAllV() = default;
  // send_counts[p]: elements for peer p (contiguous in `send`, peer order). Fills recv_counts and
  // resizes `recv`. Element type is fixed per call: bytes of `elem_size` each.
  virtual void exchange(const void* send, const std::vector<int64_t>& send_counts, std::size_t elem_size,
                        std::vector<char>& recv, std::vector<int64_t>& recv_counts) = 0;
  // Exchange where the receiver already knows its counts (replies in the reverse direction).
  virtual void exchange_known(const void* send, const std::vector<int64_t>& send_counts, std::size_t elem_size,
                              void* recv, const std::vector<int64_t>& recv_counts) = 0;
};

class MpiAllToAllV final : public AllToAllV {
 public:
  explicit MpiAllToAllV(MPI_Comm comm);
  void exchange(const void* send, const std::vector<int64_t>& send_counts, std::size_t elem_size, std::vector<char>& recv,
                std::vector<int64_t>& recv_counts) override;
  void exchange_known(const void* send, const std::vector<int64_t>& send_counts, std::size_t elem_size, void* recv,
                      const std::vector<int64_t>& recv_counts) override;

 private:
  MPI_Comm comm_;
  int size_ = 1;
};

}  // namespace moerun::comm

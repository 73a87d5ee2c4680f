// NodeSharedMemory: one MPI-3 shared-memory window per node (MPI_Win_allocate_shared on the node's
// communicator), so the ranks of a node read and write each other's regions directly — the
// intra-node transport for host buffers (DESIGN §4). Regions grow collectively. fence() is a
// barrier through the window itself (an epoch counter per rank, release/acquire): it orders writes
// before it with reads after it, costs no MPI call, and on --comm-timeout names the ranks that did
// not arrive.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <mpi.h>

#include "comm/mpi.hpp"

namespace moerun::comm {

class NodeSharedMemory {
 public:
  // `node` must contain exactly the ranks that share memory (a subset of one host).
  // `world_ranks[local]` names node ranks in errors.
  NodeSharedMemory(MPI_Comm node, std::size_t initial_bytes, double timeout_s, std::vector<int> world_ranks);
  ~NodeSharedMemory();
  NodeSharedMemory(const NodeSharedMemory&) = delete;
  NodeSharedMemory& operator=(const NodeSharedMemory&) = delete;

  // Collective over the node: every region becomes at least `bytes` (same value on every rank).
  // Returns true when the regions moved (pointers from region() before are stale).
  bool reserve(std::size_t bytes);
  char* region(int local_rank) const { return bases_[static_cast<std::size_t>(local_rank)] + kHeader; }
  std::size_t region_bytes() const { return bytes_; }
  // Memory barrier + node barrier (with --comm-timeout).
  void fence();

 private:
  static constexpr std::size_t kHeader = 64;  // the rank's fence epoch, alone on its cache line
  void allocate(std::size_t bytes);
  void release();
  uint64_t* epoch_of(int local_rank) const { return reinterpret_cast<uint64_t*>(bases_[static_cast<std::size_t>(local_rank)]); }
  OwnedComm node_;
  MPI_Win win_ = MPI_WIN_NULL;
  int local_rank_ = 0;
  int local_size_ = 1;
  double timeout_s_;
  std::size_t bytes_ = 0;
  std::vector<char*> bases_;
  std::vector<int> world_ranks_;
  uint64_t epoch_ = 0;
};

}  // namespace moerun::comm

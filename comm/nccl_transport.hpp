// NcclNodeExchange: the intra-node all-to-all-v for device buffers (DESIGN §4): one NCCL
// communicator per node, built from an id broadcast over the node's MPI communicator; an exchange is
// ncclGroupStart, ncclSend/ncclRecv per peer with data, ncclGroupEnd, stream synchronise. CUDA_CHECK
// and NCCL_CHECK (base/cuda_check.hpp) turn failures into moerun::Error. Built whenever the CUDA toolkit (with
// NCCL) is found; selected only where a GPU is present.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <mpi.h>

namespace moerun::comm {

class NcclNodeExchange {
 public:
  // `node`: the ranks of one node; each uses GPU (local rank mod device count), honouring
  // CUDA_VISIBLE_DEVICES.
  explicit NcclNodeExchange(MPI_Comm node);
  ~NcclNodeExchange();
  NcclNodeExchange(const NcclNodeExchange&) = delete;
  NcclNodeExchange& operator=(const NcclNodeExchange&) = delete;

  // Device buffers; bytes per local peer, contiguous in local-rank order.
  void exchange(const void* d_send, const std::vector<int64_t>& send_bytes, void* d_recv, const std::vector<int64_t>& recv_bytes);
  int device() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace moerun::comm

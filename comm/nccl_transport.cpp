// NCCL intra-node exchange.
#include "comm/nccl_transport.hpp"

#include "base/cuda_check.hpp"
#include "base/cuda_device.hpp"
#include "base/cuda_handles.hpp"
#include "base/error.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {

struct NcclNodeExchange::Impl {
  int device = 0;
  int local = 0, size = 1;
  cuda::Stream stream;
  ncclComm_t comm = nullptr;
};

NcclNodeExchange::NcclNodeExchange(MPI_Comm node) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  MPI_CHECK(MPI_Comm_rank(node, &s.local));
  MPI_CHECK(MPI_Comm_size(node, &s.size));
  // NCCL refuses two ranks of one communicator on the same GPU (seen on a one-GPU H200 with 2 ranks).
  if (const int devices = cuda_device_count(); devices > 0 && s.size > devices)
    fail(ErrorKind::Usage, "the NCCL exchange needs one GPU per rank: ", s.size, " ranks on this node, ", devices, " GPU(s)");
  s.device = use_cuda_device(s.local, "the NCCL exchange");
  s.stream = cuda::make_stream();
  ncclUniqueId id;
  if (s.local == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, node));
  NCCL_CHECK(ncclCommInitRank(&s.comm, s.size, id, s.local));
}

NcclNodeExchange::~NcclNodeExchange() {
  Impl& s = *impl_;
  if (s.comm) ncclCommDestroy(s.comm);
}

int NcclNodeExchange::device() const {
  return impl_->device;
}

void NcclNodeExchange::exchange(const void* d_send, const std::vector<int64_t>& send_bytes, void* d_recv,
                                const std::vector<int64_t>& recv_bytes) {
  Impl& s = *impl_;
  CUDA_CHECK(cudaSetDevice(s.device));
  NCCL_CHECK(ncclGroupStart());
  std::size_t so = 0, ro = 0;
  for (int p = 0; p < s.size; ++p) {
    if (send_bytes[p] > 0)
      NCCL_CHECK(
          ncclSend(static_cast<const char*>(d_send) + so, static_cast<std::size_t>(send_bytes[p]), ncclChar, p, s.comm, s.stream.get()));
    if (recv_bytes[p] > 0)
      NCCL_CHECK(ncclRecv(static_cast<char*>(d_recv) + ro, static_cast<std::size_t>(recv_bytes[p]), ncclChar, p, s.comm, s.stream.get()));
    so += static_cast<std::size_t>(send_bytes[p]);
    ro += static_cast<std::size_t>(recv_bytes[p]);
  }
  NCCL_CHECK(ncclGroupEnd());
  CUDA_CHECK(cudaStreamSynchronize(s.stream.get()));
}

}  // namespace moerun::comm

// NCCL intra-node exchange.
#include "comm/nccl_transport.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include "base/error.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {
namespace {

#define CUDA_CHECK(expr)                                                                                   \
  do {                                                                                                     \
    cudaError_t moerun_cuda_ = (expr);                                                                     \
    if (moerun_cuda_ != cudaSuccess)                                                                       \
      throw ::moerun::Error(::moerun::ErrorKind::Comm, ::moerun::str("CUDA: ", #expr, " failed: ",         \
                                                                     cudaGetErrorString(moerun_cuda_), " (", \
                                                                     __FILE__, ":", __LINE__, ")"));       \
  } while (0)

#define NCCL_CHECK(expr)                                                                                   \
  do {                                                                                                     \
    ncclResult_t moerun_nccl_ = (expr);                                                                    \
    if (moerun_nccl_ != ncclSuccess)                                                                       \
      throw ::moerun::Error(::moerun::ErrorKind::Comm, ::moerun::str("NCCL: ", #expr, " failed: ",         \
                                                                     ncclGetErrorString(moerun_nccl_), " (", \
                                                                     __FILE__, ":", __LINE__, ")"));       \
  } while (0)

}  // namespace

struct NcclNodeExchange::Impl {
  int device = 0;
  int local = 0, size = 1;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
};

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

NcclNodeExchange::NcclNodeExchange(MPI_Comm node) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  MPI_CHECK(MPI_Comm_rank(node, &s.local));
  MPI_CHECK(MPI_Comm_size(node, &s.size));
  const int devices = cuda_device_count();
  if (devices == 0) fail(ErrorKind::Usage, "NCCL exchange needs a CUDA device; none is visible to this rank");
  s.device = s.local % devices;
  CUDA_CHECK(cudaSetDevice(s.device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  ncclUniqueId id;
  if (s.local == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, node));
  NCCL_CHECK(ncclCommInitRank(&s.comm, s.size, id, s.local));
}

NcclNodeExchange::~NcclNodeExchange() {
  Impl& s = *impl_;
  if (s.comm) ncclCommDestroy(s.comm);
  if (s.stream) cudaStreamDestroy(s.stream);
}

int NcclNodeExchange::device() const { return impl_->device; }

void NcclNodeExchange::exchange(const void* d_send, const std::vector<int64_t>& send_bytes, void* d_recv,
                                const std::vector<int64_t>& recv_bytes) {
  Impl& s = *impl_;
  CUDA_CHECK(cudaSetDevice(s.device));
  NCCL_CHECK(ncclGroupStart());
  std::size_t so = 0, ro = 0;
  for (int p = 0; p < s.size; ++p) {
    if (send_bytes[p] > 0)
      NCCL_CHECK(ncclSend(static_cast<const char*>(d_send) + so, static_cast<std::size_t>(send_bytes[p]), ncclChar, p,
                          s.comm, s.stream));
    if (recv_bytes[p] > 0)
      NCCL_CHECK(ncclRecv(static_cast<char*>(d_recv) + ro, static_cast<std::size_t>(recv_bytes[p]), ncclChar, p, s.comm,
                          s.stream));
    so += static_cast<std::size_t>(send_bytes[p]);
    ro += static_cast<std::size_t>(recv_bytes[p]);
  }
  NCCL_CHECK(ncclGroupEnd());
  CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

}  // namespace moerun::comm

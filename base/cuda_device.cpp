// CUDA device discovery and selection.
#include "base/cuda_device.hpp"

#include "base/cuda_check.hpp"

namespace moerun {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

int use_cuda_device(int local_rank, const char* what) {
  const int devices = cuda_device_count();
  if (devices == 0) fail(ErrorKind::Usage, what, " needs a CUDA device; none is visible to this process");
  const int device = (local_rank < 0 ? 0 : local_rank) % devices;
  CUDA_CHECK(cudaSetDevice(device));
  return device;
}

}  // namespace moerun

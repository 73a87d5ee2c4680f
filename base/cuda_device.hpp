// The CUDA devices this process can use, for the code that picks one (the CUDA expert backend, the
// NCCL exchange). Built only with CUDA (MOERUN_HAVE_CUDA).
#pragma once

namespace moerun {

// Number of CUDA devices visible to this process (0 without a driver or a GPU; never throws).
int cuda_device_count();
// The device a process with this local rank uses (local rank mod device count), made current on the
// calling thread; Usage error when no device is visible.
int use_cuda_device(int local_rank, const char* what);

}  // namespace moerun

// The one wrapper of the CUDA runtime, cuBLAS and NCCL error codes: each check macro throws a
// moerun::Error naming the call, the library's code and its message. Include only from code built
// when the CUDA toolkit is found (MOERUN_HAVE_CUDA); nothing else may call these libraries raw.
// CUBLAS_CHECK and NCCL_CHECK exist where their headers are on the include path.
#pragma once
#include <cuda_runtime.h>

#include "base/error.hpp"

namespace moerun::cuda_detail {

[[noreturn]] inline void cuda_failed(const char* call, cudaError_t code, const char* file, int line) {
  fail(ErrorKind::Internal, "CUDA: ", call, " failed: ", cudaGetErrorName(code), " (", static_cast<int>(code),
       "): ", cudaGetErrorString(code), " (", file, ":", line, ")");
}

}  // namespace moerun::cuda_detail

#define CUDA_CHECK(expr)                                                                                                \
  do {                                                                                                                  \
    const cudaError_t moerun_cuda_rc_ = (expr);                                                                         \
    if (moerun_cuda_rc_ != cudaSuccess) ::moerun::cuda_detail::cuda_failed(#expr, moerun_cuda_rc_, __FILE__, __LINE__); \
  } while (0)

#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
namespace moerun::cuda_detail {
[[noreturn]] inline void cublas_failed(const char* call, cublasStatus_t code, const char* file, int line) {
  fail(ErrorKind::Internal, "cuBLAS: ", call, " failed: ", cublasGetStatusName(code), " (", static_cast<int>(code),
       "): ", cublasGetStatusString(code), " (", file, ":", line, ")");
}
}  // namespace moerun::cuda_detail
#define CUBLAS_CHECK(expr)                                                                                                              \
  do {                                                                                                                                  \
    const cublasStatus_t moerun_cublas_rc_ = (expr);                                                                                    \
    if (moerun_cublas_rc_ != CUBLAS_STATUS_SUCCESS) ::moerun::cuda_detail::cublas_failed(#expr, moerun_cublas_rc_, __FILE__, __LINE__); \
  } while (0)
#endif

#if __has_include(<nccl.h>)
#include <nccl.h>
namespace moerun::cuda_detail {
[[noreturn]] inline void nccl_failed(const char* call, ncclResult_t code, const char* file, int line) {
  fail(ErrorKind::Comm, "NCCL: ", call, " failed: code ", static_cast<int>(code), ": ", ncclGetErrorString(code), " (", file, ":", line,
       ")");
}
}  // namespace moerun::cuda_detail
#define NCCL_CHECK(expr)                                                                                                \
  do {                                                                                                                  \
    const ncclResult_t moerun_nccl_rc_ = (expr);                                                                        \
    if (moerun_nccl_rc_ != ncclSuccess) ::moerun::cuda_detail::nccl_failed(#expr, moerun_nccl_rc_, __FILE__, __LINE__); \
  } while (0)
#endif

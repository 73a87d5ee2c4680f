// A backend library for the C-interface test (test_c_backend): the CPU backend exported through
// experts/backend_abi_export.hpp, as libmoerun_cuda.so exports the CUDA one, so the dlopen
// boundary is checked on a machine without a GPU. A stand-in for the GPU library, and only that.
// local_rank 99 makes opening fail with an injected usage error; local_rank 98 opens, but answers
// with an ops table of another interface version.
#include "experts/backend_abi_export.hpp"
#include "experts/cpu/cpu_backend.hpp"

extern "C" moerun_backend* moerun_cuda_backend_open_v1(const moerun_backend_model* model, moerun_backend_ops* ops,
                                                       moerun_backend_error* err) {
  using namespace moerun;
  moerun_backend* b = experts::export_backend(model, ops, err, [](const model::ModelConfig& c, int local_rank) {
    if (local_rank == 99) fail(ErrorKind::Usage, "injected: no device for local rank 99");
    static Matmul mm;
    return std::make_unique<experts::CpuBackend>(c, mm);
  });
  if (b && model->local_rank == 98) ops->abi_version = MOERUN_BACKEND_ABI_VERSION + 1;
  return b;
}

// Backend selection and names. The CUDA backend is a separate shared library, loaded here on
// demand (see experts/cuda/cuda_backend.hpp for why); this is the one place that calls dlopen.
#include "experts/backend.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>

#include "base/error.hpp"
#include "base/native_matmul.hpp"
#include "base/quant_format.hpp"
#include "experts/c_backend.hpp"
#include "experts/cpu/cpu_backend.hpp"

namespace moerun::experts {

DeviceKind parse_device(const std::string& s) {
  if (s == "cpu") return DeviceKind::Cpu;
  if (s == "cuda") return DeviceKind::Cuda;
  fail_config("device", "'", s, "': expected cpu or cuda");
}

const char* device_name(DeviceKind d) {
  return d == DeviceKind::Cuda ? "cuda" : "cpu";
}

namespace {

// libmoerun_cuda.so: `library` (MOERUN_CUDA_BACKEND) if given, else next to the running binary; its
// C entry point, and in `path_out` where it was found. Loaded once and never unloaded (backends and
// their threads' staging live until exit).
moerun_backend_open_fn load_cuda_backend(const std::string& library, std::string& path_out) {
  static std::string found;
  static moerun_backend_open_fn open = [&library] {
    std::string path;
    if (!library.empty()) {
      path = library;
    } else {
      std::error_code ec;
      const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
      path = (ec ? std::filesystem::path(".") : exe.parent_path()) / "libmoerun_cuda.so";
    }
    if (!std::filesystem::exists(path))
      fail(ErrorKind::Usage, "--device cuda: ", path,
           " not found (this moerun was built without CUDA, or the library was not installed next to it; "
           "MOERUN_CUDA_BACKEND names another)");
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) fail(ErrorKind::Io, "--device cuda: cannot load ", path, ": ", dlerror());
    void* sym = dlsym(lib, MOERUN_CUDA_BACKEND_OPEN_SYMBOL);
    if (!sym)
      fail(ErrorKind::Io, "--device cuda: ", path, " has no ", MOERUN_CUDA_BACKEND_OPEN_SYMBOL,
           " (a library of another moerun version?): ", dlerror());
    found = path;
    return reinterpret_cast<moerun_backend_open_fn>(sym);
  }();
  path_out = found;
  return open;
}

}  // namespace

std::string stored_form_name(const ExpertBackend& backend, const model::ModelConfig& config) {
  const StoredForm* form = backend.stored_form();
  return form ? form->name() : str("raw;", model::WeightFormat{config.dtype, config.expert_format.scheme}.name());
}

int64_t replica_row_granule(const model::ModelConfig& config, DeviceKind device) {
  if (device != DeviceKind::Cpu) return 0;
  const WeightScheme s = config.expert_format.scheme;
  if (is_group_quantized(s) || is_native_quantized(s) || Matmul::rows_independent(config.expert_format.dtype)) return 1;
  return config.expert_format.dtype == DType::BF16 && !Matmul::bf16_widened() ? Matmul::kRowChunk : 0;
}

std::unique_ptr<ExpertBackend> make_expert_backend(const BackendSpec& spec, const model::ModelConfig& config, Matmul& compute,
                                                   int local_rank) {
  // Both backends compute every format (the CUDA backend dequantizes quantized experts in front of
  // cuBLAS); a format added later without kernels would be refused here by name.
  if (spec.device == DeviceKind::Cpu) return std::make_unique<CpuBackend>(config, compute, spec.host_weights);
  std::string path;
  const moerun_backend_open_fn open = load_cuda_backend(spec.cuda_library, path);
  return open_c_backend(open, path, config, local_rank);
}

}  // namespace moerun::experts

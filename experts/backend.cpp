// Backend selection and names. The CUDA backend is a separate shared library, loaded here on
// demand (see experts/cuda/cuda_backend.hpp for why); this is the one place that calls dlopen.
#include "experts/backend.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>

#include "base/error.hpp"
#include "experts/cpu/cpu_backend.hpp"

namespace moerun::experts {

DeviceKind parse_device(const std::string& s) {
  if (s == "cpu") return DeviceKind::Cpu;
  if (s == "cuda") return DeviceKind::Cuda;
  fail_config("device", "'", s, "': expected cpu or cuda");
}

const char* device_name(DeviceKind d) { return d == DeviceKind::Cuda ? "cuda" : "cpu"; }

namespace {

using CreateCuda = ExpertBackend* (*)(const io::ModelConfig*, int);

// libmoerun_cuda.so: $MOERUN_CUDA_BACKEND if set, else next to the running binary. Loaded once and
// never unloaded (backends and their threads' staging live until exit).
CreateCuda load_cuda_backend(const std::string& library) {
  static CreateCuda create = [&library] {
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
    void* sym = dlsym(lib, "moerun_cuda_backend_create");
    if (!sym) fail(ErrorKind::Io, "--device cuda: ", path, " has no moerun_cuda_backend_create: ", dlerror());
    return reinterpret_cast<CreateCuda>(sym);
  }();
  return create;
}

}  // namespace

std::string stored_form_name(const ExpertBackend& backend, const io::ModelConfig& config) {
  const StoredForm* form = backend.stored_form();
  return form ? form->name() : str("raw;", dtype_name(config.dtype));
}

std::unique_ptr<ExpertBackend> make_expert_backend(const BackendSpec& spec, const io::ModelConfig& config, Matmul& compute,
                                                   int local_rank) {
  // Every backend today computes plain f32/bf16 experts; quantized formats need their kernels first.
  if (config.expert_format.scheme != io::WeightScheme::Plain)
    fail(ErrorKind::Usage, "experts in weight format ", config.expert_format.name(), " have no kernels in the ",
         device_name(spec.device), " backend yet");
  if (spec.device == DeviceKind::Cpu) return std::make_unique<CpuBackend>(config, compute);
  return std::unique_ptr<ExpertBackend>(load_cuda_backend(spec.cuda_library)(&config, local_rank));
}

}  // namespace moerun::experts

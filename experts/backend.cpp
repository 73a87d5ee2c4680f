// Backend selection and names. The CUDA backend is a separate shared library, loaded here on
// demand (see experts/cuda/cuda_backend.hpp for why); this is the one place that calls dlopen.
#include "experts/backend.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "base/error.hpp"
#include "experts/cpu/cpu_backend.hpp"

namespace moerun::experts {

DeviceKind parse_device(const std::string& s) {
  if (s == "cpu") return DeviceKind::Cpu;
  if (s == "cuda") return DeviceKind::Cuda;
  fail(ErrorKind::Usage, "--device '", s, "': expected cpu or cuda");
}

const char* device_name(DeviceKind d) { return d == DeviceKind::Cuda ? "cuda" : "cpu"; }

namespace {

using CreateCuda = ExpertBackend* (*)(const io::ModelConfig*, int);

// libmoerun_cuda.so: $MOERUN_CUDA_BACKEND if set, else next to the running binary. Loaded once and
// never unloaded (backends and their threads' staging live until exit).
CreateCuda load_cuda_backend() {
  static CreateCuda create = [] {
    std::string path;
    if (const char* env = std::getenv("MOERUN_CUDA_BACKEND"); env && *env) {
      path = env;
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

std::unique_ptr<ExpertBackend> make_expert_backend(DeviceKind device, const io::ModelConfig& config, Matmul& compute,
                                                   int local_rank) {
  if (device == DeviceKind::Cpu) return std::make_unique<CpuBackend>(config, compute);
  return std::unique_ptr<ExpertBackend>(load_cuda_backend()(&config, local_rank));
}

}  // namespace moerun::experts

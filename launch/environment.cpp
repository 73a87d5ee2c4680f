// Reading the environment once.
#include "launch/environment.hpp"

#include <malloc.h>

#include <cstdlib>

#include "base/error.hpp"

namespace moerun::launch {
namespace {

std::string get(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

}  // namespace

Environment Environment::read() {
  Environment e;
  e.log = get("MOERUN_LOG");
  e.internode = get("MOERUN_INTERNODE");
  e.ucx_peer_errors = get("MOERUN_UCX_PEER_ERRORS");
  e.hdf5_probe = get("MOERUN_HDF5_PROBE");
  e.hdf5_probe_timeout = get("MOERUN_HDF5_PROBE_TIMEOUT");
  e.cuda_backend = get("MOERUN_CUDA_BACKEND");
  e.ranks_per_node = get("MOERUN_RANKS_PER_NODE");
  e.python = get("MOERUN_PYTHON");
  e.omp_num_threads = std::getenv("OMP_NUM_THREADS") != nullptr;
  e.malloc_tuned = std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr || std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr;
  e.launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
  e.singleton_set = std::getenv("OMPI_MCA_ess_singleton_isolated") != nullptr;
  e.pml_set = std::getenv("OMPI_MCA_pml") != nullptr;
  return e;
}

void isolate_mpi_singleton(const Environment& env) {
  if (env.launched) return;
  if (!env.singleton_set) ::setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
  if (!env.pml_set) ::setenv("OMPI_MCA_pml", "ob1", 0);
}

void keep_freed_memory(const Environment& env) {
  if (env.malloc_tuned) return;
  mallopt(M_MMAP_THRESHOLD, 256 << 20);  // below 256 MiB from the heap, reused after free
  mallopt(M_TRIM_THRESHOLD, 1 << 30);  // and not handed back until 1 GiB is free at the top
}

void apply_log_level(const Environment& env) {
  if (env.log == "warn")
    log::set_level(log::Level::Warn);
  else if (env.log == "debug")
    log::set_level(log::Level::Debug);
}

io::Hdf5Probe hdf5_probe_from(const Environment& env) {
  if (env.hdf5_probe == "0") return {};
  double timeout = 60;
  if (!env.hdf5_probe_timeout.empty()) {
    const char* t = env.hdf5_probe_timeout.c_str();
    char* end = nullptr;
    timeout = std::strtod(t, &end);
    if (end == t || *end || !(timeout > 0))
      fail(ErrorKind::Usage, "MOERUN_HDF5_PROBE_TIMEOUT must be a number of seconds > 0, not \"", env.hdf5_probe_timeout, "\"");
  }
  return io::hdf5_probe_of_this_executable(timeout);
}

int ranks_per_node_from(const Environment& env) {
  if (env.ranks_per_node.empty()) return 0;
  char* end = nullptr;
  const long v = std::strtol(env.ranks_per_node.c_str(), &end, 10);
  if (*end || v < 1 || v > 1 << 20)
    fail(ErrorKind::Usage, "MOERUN_RANKS_PER_NODE must be a rank count >= 1, not \"", env.ranks_per_node, "\"");
  return static_cast<int>(v);
}

void apply_environment(const Environment& env, comm::TransportConfig& t) {
  t.internode = env.internode;
  if (env.ucx_peer_errors == "0") t.ucx_peer_errors = 0;
  if (env.ucx_peer_errors == "1") t.ucx_peer_errors = 1;
}

void apply_environment(const Environment& env, runtime::EngineConfig& c) {
  apply_environment(env, c.transport);
  c.cuda_library = env.cuda_backend;
  c.hdf5_probe = hdf5_probe_from(env);
  if (c.ranks_per_node == 0) c.ranks_per_node = ranks_per_node_from(env);
  c.share_host_cores = !env.omp_num_threads;
}

void apply_environment(const Environment& env, experts::BackendSpec& b) {
  b.cuda_library = env.cuda_backend;
}

}  // namespace moerun::launch

// The environment variables moerun reads, all of them and only here: each is read once into the
// typed config it belongs to, so nothing below launch/ calls getenv (README "Environment").
#pragma once
#include <string>

#include "base/log.hpp"
#include "io/hdf5_probe.hpp"
#include "io/object_store.hpp"
#include "runtime/engine.hpp"

namespace moerun::launch {

struct Environment {
  std::string log;  // MOERUN_LOG: warn | info | debug
  std::string internode;  // MOERUN_INTERNODE: ucx | mpi
  std::string ucx_peer_errors;  // MOERUN_UCX_PEER_ERRORS: 0 | 1
  std::string hdf5_probe;  // MOERUN_HDF5_PROBE: 0 turns the probe off
  std::string hdf5_probe_timeout;  // MOERUN_HDF5_PROBE_TIMEOUT: seconds
  std::string cuda_backend;  // MOERUN_CUDA_BACKEND: libmoerun_cuda.so to load
  std::string ranks_per_node;  // MOERUN_RANKS_PER_NODE: as --ranks-per-node
  std::string python;  // MOERUN_PYTHON: interpreter for tokenizer.json
  bool omp_num_threads = false;  // OMP_NUM_THREADS given: moerun leaves thread counts alone
  bool malloc_tuned = false;  // MALLOC_MMAP_THRESHOLD_ or MALLOC_TRIM_THRESHOLD_ given: glibc's settings stay
  bool launched = false;  // OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_RANK: started by mpirun, srun or another launcher
  bool singleton_set = false;  // OMPI_MCA_ess_singleton_isolated given: left as it is
  bool pml_set = false;  // OMPI_MCA_pml given: left as it is

  static Environment read();
};

// MOERUN_LOG applied to the logger (unknown values leave it at info).
void apply_log_level(const Environment& env);
// Freed memory stays in the process (unless the MALLOC_* thresholds are given): buffers of a few
// MB that a step frees and the next allocates again (routing, scratch, a new sequence's KV cache)
// would otherwise go back to the kernel and fault in again page by page, which a VM makes costly
// (a 1024-token Qwen3-shaped prefill step: 0.67 -> 0.57 s). Memory use stays bounded by the peak.
void keep_freed_memory(const Environment& env);
// Started without a launcher (`moerun infer ...` alone), Open MPI's singleton runs without the
// daemon it would otherwise start for it (ess_singleton_isolated): 0.15-0.25 s of every start on
// this VM (0.43 -> 0.30 s for a tiny model), and no daemon left in the caller's cgroup. It also
// takes the ob1 messaging layer instead of UCX's: a process alone has no peer, and UCX's transport
// probing cost ~0.25 s of every start on the AMD host (docs/NOTES.md "Start-up"). Each setting only
// where the user gave none. Before MPI_Init.
void isolate_mpi_singleton(const Environment& env);
// The HDF5 probe as MOERUN_HDF5_PROBE and MOERUN_HDF5_PROBE_TIMEOUT say (Usage error on a bad timeout).
io::Hdf5Probe hdf5_probe_from(const Environment& env);
// MOERUN_RANKS_PER_NODE as a count (0 when unset; Usage error when not a count).
int ranks_per_node_from(const Environment& env);
// Fills what the environment decides in an engine config: transport, CUDA library, HDF5 probe,
// the virtual node size when `ranks_per_node` is 0, whether ranks split the host's cores.
void apply_environment(const Environment& env, runtime::EngineConfig& c);
// The CUDA library of MOERUN_CUDA_BACKEND, for commands that make a backend themselves (bench layer).
void apply_environment(const Environment& env, experts::BackendSpec& b);
// MOERUN_INTERNODE and MOERUN_UCX_PEER_ERRORS (bench a2a).
void apply_environment(const Environment& env, comm::TransportConfig& t);

}  // namespace moerun::launch

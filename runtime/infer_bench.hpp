// `moerun bench infer`: a synthetic model and workload run through the distributed runtime on the
// ranks of this job, then (same job, rank 0 alone, the other ranks idle) through the single-process
// runtime, so the tokens/s ratio is measured in one run. Reports per role the seconds in each phase.
#pragma once
#include <cstdint>
#include <string>

#include <mpi.h>

#include "io/synthetic_model.hpp"
#include "runtime/infer.hpp"

namespace moerun::runtime {

struct InferBenchConfig {
  io::SynthConfig model;
  int64_t batch = 64;        // requests, all in flight together
  int64_t prompt_len = 16;
  int64_t new_tokens = 16;
  bool baseline = true;      // also run single-process on rank 0
  InferConfig infer;         // layout and runtime options (model/input/output are filled in)
  std::string work_dir;      // where the model and files go (default: a temp dir, removed after)
};

// `bench infer --cache-compare`: the same workload all-resident, then with L1 = l1_fraction of each
// expert rank's experts (L2 on local disk, fresh per run) for --prefetch lru and affinity, the
// graph built from a routing trace of a different request set. One row per run.
struct CacheBenchRow {
  std::string mode;             // all-resident | lru | affinity
  double tokens_per_s = 0;
  InferReport report;
};
struct CacheBenchResult {
  std::vector<CacheBenchRow> rows;
  // The skew, measured on the trace run: the share of routed slots the two busiest experts of a
  // layer take, lowest and highest over the layers.
  double top2_share_min = 0, top2_share_max = 0;
};
CacheBenchResult run_cache_bench(const InferBenchConfig& cfg, double l1_fraction, MPI_Comm world);
std::string cache_bench_table(const InferBenchConfig& cfg, double l1_fraction, const CacheBenchResult& r);
std::string cache_bench_json(const InferBenchConfig& cfg, double l1_fraction, const CacheBenchResult& r);

struct InferBenchResult {
  InferReport distributed;
  InferReport single;        // zero when no baseline
  double tokens_per_s = 0;
  double single_tokens_per_s = 0;
  // Weight streaming at batch 1 in one process: every decode step reads the dense matrices, the LM
  // head and top_k experts per layer; against a STREAM-like copy on this machine (OpenMP threads).
  double copy_gbps = 0;
  double decode_weight_bytes_per_step = 0;  // batch 1
  double decode_stream_gbps = 0;            // batch 1, one process; else 0
};

// Bytes of weights one decode step of a single sequence reads (dense matrices, LM head, gates,
// top_k experts per layer).
double decode_weight_bytes_per_token(const io::ModelConfig& m);
// Copy bandwidth (read + write bytes per second) of `threads` OpenMP threads over 256 MiB arrays.
double stream_copy_gbps(int threads);

InferBenchResult run_infer_bench(const InferBenchConfig& cfg, MPI_Comm world);
// The pieces, for the scaling sweep. The benchmark's files: --work-dir (kept), or a fresh temp dir,
// the same on every rank, that rank 0 removes when the benchmark ends, by an error too (the
// destructor runs while the exception unwinds). Collective.
class BenchDir {
 public:
  BenchDir(const std::string& work_dir, MPI_Comm world);
  ~BenchDir();
  BenchDir(const BenchDir&) = delete;
  BenchDir& operator=(const BenchDir&) = delete;
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
  bool owned_ = false;
};
// One run of the requests of `cfg` on `comm` with the model already in DIR/model.
InferReport run_infer_bench_point(const InferBenchConfig& cfg, const std::string& dir, MPI_Comm comm);
double tokens_per_second(const InferReport& r);

std::string infer_bench_table(const InferBenchConfig& cfg, const InferBenchResult& r);
std::string infer_bench_json(const InferBenchConfig& cfg, const InferBenchResult& r);

}  // namespace moerun::runtime

// `moerun bench infer`: a synthetic model and workload run on the Engine (runtime/engine.hpp) over
// the ranks of this job, then (same job, rank 0 alone, the other ranks idle) in one process, so the
// tokens/s ratio is measured in one run. The requests are made in memory and their results dropped:
// the only file is the synthetic model (and, for --cache-compare, the L2 tiers and the trace that
// the affinity graph is built from). Reports per role the seconds in each phase.
#pragma once
#include <cstdint>
#include <string>

#include <mpi.h>

#include "convert/synthetic_model.hpp"
#include "launch/bench/alltoallv_bench.hpp"
#include "runtime/batch_loop.hpp"
#include "runtime/engine.hpp"

namespace moerun::bench {

// What the benchmark's requests ask for besides generation (bench infer --scoring-compare).
enum class BenchScoring { None, PromptLogprobs, SecondHalf };

struct InferBenchConfig {
  convert::SynthConfig model;
  // PromptLogprobs: prefill-only requests scoring every prompt token; SecondHalf: those scoring the
  // second half only, as moerun perplexity's windows.
  BenchScoring scoring = BenchScoring::None;
  int64_t batch = 64;  // requests, all in flight together
  int64_t prompt_len = 16;
  int64_t new_tokens = 16;
  bool baseline = true;  // also run single-process on rank 0
  runtime::EngineConfig engine;  // layout and runtime options (the model is filled in)
  runtime::SchedulerConfig scheduler;  // batch limits are raised to hold the whole batch (unless not)
  bool whole_batch_steps = true;  // false: the scheduler's limits as given, as infer runs
  std::string work_dir;  // where the model and files go (default: a temp dir, removed after)
  // --link-fit: `bench a2a --json`'s fits, to predict the routers' exchange time from (empty path: none).
  std::string link_fit_path;
  A2aFitFile link_fit;
};

// One run of the benchmark's requests, on rank 0: the routers' counters and the engine's report.
struct BenchRun {
  runtime::ThroughputCounters run;  // summed / maxed over routers
  int64_t processed_tokens = 0;
  double seconds = 0;  // the batch loop
  runtime::EngineReport engine;
  // Σ over the requests of a 32-bit hash of (id, output tokens), over every router: two runs of
  // the same requests with the same outputs have the same digest, in any completion order.
  int64_t outputs_digest = 0;
};

// `bench infer --cache-compare`: the same workload all-resident, then with L1 = l1_fraction of each
// expert rank's experts (L2 on local disk, fresh per run) for --prefetch lru and affinity, the
// graph built from a routing trace of a different request set. One row per run.
struct CacheBenchRow {
  std::string mode;  // all-resident | lru | affinity
  double tokens_per_s = 0;
  BenchRun report;
  int64_t l1_bytes = 0;  // 0: all resident
};
struct CacheBenchResult {
  std::vector<CacheBenchRow> rows;
  // The skew, measured on the trace run: the share of routed slots the two busiest experts of a
  // layer take, lowest and highest over the layers.
  double top2_share_min = 0, top2_share_max = 0;
};
// `l1_budget_of`: the format whose expert size sizes L1 (l1_fraction of a rank's experts at that
// size); empty: the model's own. A q4 run with bf16's budget holds 3.2x the experts.
CacheBenchResult run_cache_bench(const InferBenchConfig& cfg, double l1_fraction, MPI_Comm world, const std::string& l1_budget_of = "");
std::string cache_bench_table(const InferBenchConfig& cfg, double l1_fraction, const CacheBenchResult& r);
std::string cache_bench_json(const InferBenchConfig& cfg, double l1_fraction, const CacheBenchResult& r);

struct InferBenchResult {
  BenchRun distributed;
  BenchRun single;  // zero when no baseline
  double tokens_per_s = 0;
  double single_tokens_per_s = 0;
  // Weight streaming at batch 1 in one process: every decode step reads the dense matrices, the LM
  // head and top_k experts per layer; against a STREAM-like copy on this machine (OpenMP threads).
  double copy_gbps = 0;
  double decode_weight_bytes_per_step = 0;  // batch 1
  double decode_stream_gbps = 0;  // batch 1, one process; else 0
};

// Bytes of weights one decode step of a single sequence reads (dense matrices, LM head, gates,
// top_k experts per layer).
double decode_weight_bytes_per_token(const model::ModelConfig& m, WeightScheme dense = WeightScheme::Plain);
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
// One run of the requests of `cfg` on `comm` with the model already in DIR/model; `salt` varies
// the prompts; `trace`: write the routers' routing traces there (TRACE, TRACE.1, ...).
BenchRun run_infer_bench_point(const InferBenchConfig& cfg, const std::string& dir, MPI_Comm comm, int64_t salt = 0,
                               const std::string& trace = "");
double tokens_per_second(const BenchRun& r);

// `bench infer --scoring-compare`: the same prompts run `runs` times interleaved as generation of one
// token (the prefill of infer), as prompt log-probs of every position and as perplexity's windows
// (the second half scored); prompt tokens per second of prefill steps, and the LM head's seconds.
struct ScoringBenchRow {
  std::string mode;  // prefill | prompt-logprobs | second-half
  std::vector<double> tokens_per_s;  // per run
  std::vector<double> head_s;
};
std::vector<ScoringBenchRow> run_scoring_bench(const InferBenchConfig& cfg, int runs, MPI_Comm world);
std::string scoring_bench_table(const InferBenchConfig& cfg, const std::vector<ScoringBenchRow>& rows);
std::string scoring_bench_json(const InferBenchConfig& cfg, const std::vector<ScoringBenchRow>& rows);

std::string infer_bench_table(const InferBenchConfig& cfg, const InferBenchResult& r);
std::string infer_bench_json(const InferBenchConfig& cfg, const InferBenchResult& r);

}  // namespace moerun::bench

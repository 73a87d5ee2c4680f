// `moerun infer`: one process, or router and expert ranks under mpirun (DESIGN §1). Every rank
// validates the configuration and requests and loads its part of the model (routers: model.h5;
// expert ranks: their experts); a failure anywhere is reported once and every rank exits with its
// code. Routers then run their share of the requests with continuous batching and micro-batched
// ping-pong, journal each result, and rank 0 writes the final output atomically in input order.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include <mpi.h>

#include "experts/expert_cache.hpp"
#include "io/hdf5_probe.hpp"
#include "io/tokenizer.hpp"
#include "io/requests.hpp"
#include "io/object_store.hpp"
#include "router/router_config.hpp"
#include "runtime/hot_swap.hpp"
#include "runtime/prefix_cache.hpp"
#include "runtime/scheduler.hpp"

namespace moerun::runtime {

struct InferConfig {
  std::string model_dir;
  std::string input;
  std::string output;
  bool resume = false;
  bool skip_invalid = false;
  bool quiet = false;
  std::string stats_json;   // optional
  std::string trace;        // optional routing trace (HDF5); router N > 0 writes TRACE.N
  std::string logits_out;   // optional: JSONL of the logits behind every emitted token (testing)
  io::RequestDefaults defaults;
  SchedulerConfig scheduler;
  PrefixCacheConfig prefix_cache;  // max_bytes 0: off
  router::RouterConfig router;
  int routers_per_node = 1;
  int ranks_per_node = 0;          // 0: nodes from MPI_Comm_split_type
  std::string placement = "round-robin";
  int micro_batches = 0;           // 0: 1 in one process (nothing to overlap), 2 when distributed (measured)
  double comm_timeout_s = 300;
  std::string a2a = "auto";        // mpi | hier | auto
  experts::ExpertCacheConfig cache; // l1_bytes 0: every owned expert resident
  experts::DeviceKind device = experts::DeviceKind::Cpu;  // where expert ranks keep and compute experts
  std::string affinity;            // affinity graph for --prefetch affinity
  io::S3Config s3;                 // for --model s3://bucket/prefix
  io::Hdf5Probe hdf5_probe;        // walks local HDF5 inputs in a child process first (off when empty)
  io::TokenizerConfig tokenizer;   // for requests with "prompt" text (the model directory's tokenizer)
  std::string swap_control;        // hot swap: a control file polled between steps (runtime/hot_swap.hpp)

  void validate() const;  // Usage errors naming the option
};

struct InferReport {
  int64_t requests = 0;
  int64_t generated_tokens = 0;   // all routers (rank 0)
  int64_t processed_tokens = 0;   // all routers (rank 0)
  double seconds = 0;             // the inference loop, without loading
  // Steps with prompt tokens (prefill) and steps with generated tokens only (decode): tokens and
  // seconds, summed over routers (tokens) and their maximum (seconds) (rank 0).
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double first_token_s = -1;      // from the start of serving (warm-up included) to the first generated token; -1: none
  int ranks = 1;
  int routers = 1;
  // Seconds per phase and role, the maximum over the ranks of that role (rank 0).
  std::map<std::string, std::map<std::string, double>> phases;
  // Expert cache counters (rank 0): summed over expert ranks, and per expert rank.
  bool cache_on = false;
  experts::CacheCounters cache;
  std::map<int, experts::CacheCounters> cache_per_rank;
  // Results journaled and fdatasyncs of the journals (rank 0, summed over routers): one sync per
  // step, not per result (group commit).
  int64_t journaled = 0, journal_syncs = 0;
  BatchingCounters batching;
  HotSwapCounters hot_swap;       // --swap-control (rank 0: experts, failures and seconds summed; applied and max_ms the maximum)      // --batching minhash (rank 0, summed over routers)
  // Prefix cache counters (rank 0, summed over routers).
  bool prefix_on = false;
  PrefixCacheCounters prefix;
  // Object-store requests (rank 0, summed) when the model is at s3://.
  bool remote_model = false;
  io::ObjectStoreStats object_store;
};

InferReport run_infer(const InferConfig& cfg, MPI_Comm world);

// Divides requests among n routers, balanced by prompt + max_new_tokens (not by count); each
// router's list stays in input order. With a prefix cache (`prefix_block` > 0), requests whose
// prompts share their first block go to one router, in pieces of at most a fair share. Deterministic.
std::vector<std::vector<int64_t>> split_requests(const std::vector<io::Request>& requests,
                                                 const std::vector<int64_t>& pending, int n, int64_t prefix_block = 0);

}  // namespace moerun::runtime

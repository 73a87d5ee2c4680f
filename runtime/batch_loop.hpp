// The batch loop: requests in memory run on an Engine with continuous batching until every router
// is done, on every rank of the engine. Each step starts with one small reduction over all ranks
// (the step control: routers still busy, requests finished, tokens processed, generated and
// prompt tokens), which keeps the ranks in lockstep and feeds rank 0's progress line. Routers
// hand each finished request to a ResultSink; nothing here touches a file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/requests.hpp"
#include "runtime/engine.hpp"
#include "runtime/prefix_cache.hpp"
#include "runtime/routing_stats.hpp"
#include "runtime/run_counters.hpp"
#include "runtime/scheduler.hpp"

namespace moerun::runtime {

// Where a router's results go (the Job: its journal; bench infer: nowhere).
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  virtual void result(const io::Result& r) = 0;
  // After the results of a step (and before the loop starts): the Job commits its journal here.
  virtual void step_done() {}
  // The logits behind every token emitted in a step, [ids.size(), vocab] (only when wanted).
  virtual bool wants_logits() const { return false; }
  virtual void logits(const std::vector<std::string>& ids, const std::vector<float>& logits, int64_t vocab) {
    (void)ids, (void)logits, (void)vocab;
  }
  // The scored prompt rows of a step, with the step's logits [rows, vocab] (only when wanted).
  virtual bool wants_scored_rows() const { return false; }
  virtual void scored_rows(const std::vector<ScoredRow>& rows, const std::vector<float>& logits, int64_t vocab) {
    (void)rows, (void)logits, (void)vocab;
  }
};

// Results dropped (expert ranks, which have none; benchmarks).
class NullSink final : public ResultSink {
 public:
  void result(const io::Result&) override {}
};

struct BatchLoopConfig {
  SchedulerConfig scheduler;
  PrefixCacheConfig prefix_cache;  // max_bytes 0: off
  bool progress = true;  // rank 0's progress line on stderr
  bool warn_failed = true;  // a warning line per request that ended with an error in the run (non-finite values)
};

// This router's share of a job.
struct RouterWork {
  std::vector<int64_t> requests;  // indices into the request list, in order (bad lines included)
  int64_t total_requests = 0;  // of the whole job, for the progress line
  int64_t done_before = 0;  // finished in an earlier run (--resume)
  int64_t token_budget = 0;  // prompt + max_new_tokens of the job's unfinished requests (the ETA)
};

struct BatchLoopResult {
  ThroughputCounters run;  // this router's
  int64_t processed_tokens = 0;  // all routers, from the step control
  double seconds = 0;  // the loop, without set-up
  BatchingCounters batching;
  bool prefix_on = false;
  PrefixCacheCounters prefix;
};

// Collective over the engine's ranks, after Engine::start_serving(). Routers run `work` (requests
// with a parse error become results with that error; max_new_tokens 0 needs no compute); expert
// ranks serve until the routers are done. `stats` collects the routers' routing decisions.
BatchLoopResult run_batch_loop(Engine& engine, const std::vector<io::Request>& requests, const RouterWork& work, const BatchLoopConfig& cfg,
                               ResultSink& sink, RoutingStats& stats);

}  // namespace moerun::runtime

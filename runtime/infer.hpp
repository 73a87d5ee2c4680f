// The Job of `moerun infer`: a request file in, a result file out, on an Engine (runtime/engine.hpp)
// under mpirun or in one process. It adds what the engine leaves out: the files. Rank 0 takes the
// output's lock and reads the requests (every rank parses them); routers journal each result
// (--resume skips those) and may write logits and routing traces; at the end rank 0 decodes text
// results, writes the output atomically in input order, prints the summary and writes the stats
// JSON. Set-up failures anywhere are reported once and every rank exits with its code.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include <mpi.h>

#include "io/requests.hpp"
#include "io/tokenizer.hpp"
#include "runtime/batch_loop.hpp"
#include "runtime/engine.hpp"
#include "runtime/prefix_cache.hpp"
#include "runtime/request_split.hpp"
#include "runtime/run_counters.hpp"
#include "runtime/scheduler.hpp"

namespace moerun::runtime {

struct InferConfig {
  EngineConfig engine;
  std::string input;
  std::string output;
  bool resume = false;
  bool skip_invalid = false;
  bool split_reasoning = false;  // OpenAI chat output: <think>...</think> into reasoning_content (io/openai_batch)
  bool quiet = false;
  std::string stats_json;  // optional
  std::string trace;  // optional routing trace (HDF5); router N > 0 writes TRACE.N
  std::string logits_out;  // optional: JSONL of the logits behind every emitted token (testing)
  io::RequestDefaults defaults;
  SchedulerConfig scheduler;
  PrefixCacheConfig prefix_cache;  // max_bytes 0: off
  io::TokenizerConfig tokenizer;  // for requests with "prompt" text (the model directory's tokenizer)
  // How a caller names a config field in messages (launch/: its flag); unset: the field's own name.
  std::function<std::string(const std::string& field)> option_name;

  void validate() const;  // ConfigError naming the field ("engine.micro_batches", "defaults.top_p", ...)
};

// What a job did, on rank 0 (counters summed or maxed over ranks as their field tables say).
struct InferReport {
  int64_t requests = 0;
  int64_t processed_tokens = 0;  // all routers
  double seconds = 0;  // the batch loop, without set-up
  ThroughputCounters run;
  JournalCounters journal;
  BatchingCounters batching;  // --batching minhash
  bool prefix_on = false;
  PrefixCacheCounters prefix;
  EngineReport engine;
  int64_t failed_requests = 0;  // rank 0: valid requests whose output line is an error (non-finite values)
  // Rank 0's tokenization of the input before the run: text prompts encoded and chat prompts
  // rendered through the chat template, all in one call each.
  struct Tokenize {
    int64_t text_prompts = 0, chat_prompts = 0;
    double seconds = 0;
  } tokenize;
};

InferReport run_infer(const InferConfig& cfg, MPI_Comm world);

}  // namespace moerun::runtime

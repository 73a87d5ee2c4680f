// `moerun infer` in one process: validate everything, load the model, run the requests with
// continuous batching, journal each result as it finishes, write the final output atomically in
// input order, report routing statistics.
#pragma once
#include <cstdint>
#include <string>

#include "io/requests.hpp"
#include "router/router_config.hpp"
#include "runtime/scheduler.hpp"

namespace moerun::runtime {

struct InferConfig {
  std::string model_dir;
  std::string input;
  std::string output;
  bool resume = false;
  bool skip_invalid = false;
  bool quiet = false;
  bool check_weights = false;
  std::string stats_json;   // optional
  std::string trace;        // optional routing trace (HDF5)
  std::string logits_out;   // optional: JSONL of the logits behind every emitted token (testing)
  io::RequestDefaults defaults;
  SchedulerConfig scheduler;
  router::RouterConfig router;

  void validate() const;  // Usage errors naming the option
};

struct InferReport {
  int64_t requests = 0;
  int64_t generated_tokens = 0;
  int64_t processed_tokens = 0;
  double seconds = 0;
};

InferReport run_infer(const InferConfig& cfg);

}  // namespace moerun::runtime

// RoutingStats: what `infer` reports at the end (tokens, expert usage per layer, measured activation
// rate, rerouted/dropped fractions) and, with --trace, the per-token expert choices of every layer.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "io/routing_trace.hpp"
#include "router/gate.hpp"

namespace moerun::runtime {

class RoutingStats {
 public:
  RoutingStats(const model::ModelConfig& config, bool keep_trace);

  // One layer's decision for the step's tokens; `request`/`position` identify each token (trace).
  void record(int64_t layer, const router::RoutingDecision& d, const std::vector<int64_t>& request, const std::vector<int32_t>& position);
  // Counters as one flat vector (for reduction across router ranks) and back.
  std::vector<int64_t> counters() const;
  void set_counters(const std::vector<int64_t>& flat);

  int64_t tokens() const { return tokens_; }
  double activation_rate() const;  // active params per token (measured) / all params
  double expert_activation_rate() const;  // expert params used per token / all expert params
  double rerouted_fraction() const;
  double dropped_fraction() const;
  double pruned_fraction() const;  // slots left empty by dynamic top-k
  double experts_per_token() const;  // experts used per token and layer (top_k without pruning or drops)
  const std::vector<std::vector<int64_t>>& usage() const { return usage_; }
  const io::RoutingTrace& trace() const { return trace_; }

  // JSON object with the keys of the stats contract; `extra` fields (tokens_per_s...) are merged in.
  std::string to_json(double tokens_per_s, double seconds) const;
  // Human-readable summary for stderr.
  std::string summary(double tokens_per_s) const;

 private:
  model::ModelConfig config_;
  bool keep_trace_;
  int64_t tokens_ = 0;
  int64_t slots_ = 0;
  int64_t used_slots_ = 0;
  int64_t rerouted_ = 0;
  int64_t dropped_ = 0;
  int64_t pruned_ = 0;
  std::vector<std::vector<int64_t>> usage_;  // [layer][expert]
  io::RoutingTrace trace_;
};

}  // namespace moerun::runtime

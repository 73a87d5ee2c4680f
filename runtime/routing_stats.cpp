// Routing statistics and trace accumulation.
#include "runtime/routing_stats.hpp"

#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

namespace moerun::runtime {

RoutingStats::RoutingStats(const model::ModelConfig& c, bool keep_trace) : config_(c), keep_trace_(keep_trace) {
  usage_.assign(static_cast<std::size_t>(c.num_moe_layers()), std::vector<int64_t>(static_cast<std::size_t>(c.num_experts), 0));
  trace_.num_layers = c.num_moe_layers();
  trace_.num_experts = c.num_experts;
  trace_.top_k = c.top_k;
  trace_.experts.assign(static_cast<std::size_t>(c.num_moe_layers()), {});
}

void RoutingStats::record(int64_t layer, const router::RoutingDecision& d, const std::vector<int64_t>& request,
                          const std::vector<int32_t>& position) {
  if (layer == 0) {
    tokens_ += d.tokens;
    if (keep_trace_) {
      trace_.request.insert(trace_.request.end(), request.begin(), request.end());
      trace_.position.insert(trace_.position.end(), position.begin(), position.end());
    }
  }
  slots_ += d.tokens * d.top_k;
  rerouted_ += d.rerouted;
  dropped_ += d.dropped;
  pruned_ += d.pruned;
  for (int32_t e : d.expert)
    if (e >= 0) {
      ++usage_[layer][e];
      ++used_slots_;
    }
  if (keep_trace_) trace_.experts[layer].insert(trace_.experts[layer].end(), d.expert.begin(), d.expert.end());
}

std::vector<int64_t> RoutingStats::counters() const {
  std::vector<int64_t> v{tokens_, slots_, used_slots_, rerouted_, dropped_, pruned_};
  for (const auto& l : usage_) v.insert(v.end(), l.begin(), l.end());
  return v;
}

void RoutingStats::set_counters(const std::vector<int64_t>& v) {
  tokens_ = v[0];
  slots_ = v[1];
  used_slots_ = v[2];
  rerouted_ = v[3];
  dropped_ = v[4];
  pruned_ = v[5];
  std::size_t i = 6;
  for (auto& l : usage_)
    for (auto& c : l) c = v[i++];
}

double RoutingStats::expert_activation_rate() const {
  if (tokens_ == 0) return 0;
  const double per_token = static_cast<double>(used_slots_) / static_cast<double>(tokens_);
  return per_token * static_cast<double>(config_.params_per_expert()) / static_cast<double>(config_.expert_params());
}

double RoutingStats::activation_rate() const {
  if (tokens_ == 0) return 0;
  const double per_token = static_cast<double>(used_slots_) / static_cast<double>(tokens_);
  const double active = static_cast<double>(config_.dense_params()) + per_token * static_cast<double>(config_.params_per_expert());
  return active / static_cast<double>(config_.total_params());
}

double RoutingStats::rerouted_fraction() const {
  return slots_ ? static_cast<double>(rerouted_) / static_cast<double>(slots_) : 0;
}
double RoutingStats::dropped_fraction() const {
  return slots_ ? static_cast<double>(dropped_) / static_cast<double>(slots_) : 0;
}
double RoutingStats::pruned_fraction() const {
  return slots_ ? static_cast<double>(pruned_) / static_cast<double>(slots_) : 0;
}
double RoutingStats::experts_per_token() const {
  return tokens_ ? static_cast<double>(used_slots_) / static_cast<double>(tokens_ * config_.num_moe_layers()) : 0;
}

std::string RoutingStats::to_json(double tokens_per_s, double seconds) const {
  nlohmann::json j;
  j["tokens"] = tokens_;
  j["activation_rate"] = activation_rate();
  j["expert_activation_rate"] = expert_activation_rate();
  j["expert_usage"] = usage_;
  j["rerouted_fraction"] = rerouted_fraction();
  j["dropped_fraction"] = dropped_fraction();
  j["pruned_fraction"] = pruned_fraction();
  j["experts_per_token"] = experts_per_token();
  j["tokens_per_s"] = tokens_per_s;
  j["seconds"] = seconds;
  return j.dump(2);
}

std::string RoutingStats::summary(double tokens_per_s) const {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  os << "routing: " << tokens_ << " tokens through " << config_.num_moe_layers() << " layers, " << tokens_per_s << " tokens/s\n";
  os << "  activation rate " << 100 * activation_rate() << "% of all parameters per token (" << 100 * expert_activation_rate()
     << "% of expert parameters), rerouted " << 100 * rerouted_fraction() << "%, dropped " << 100 * dropped_fraction() << "%\n";
  if (pruned_ > 0)
    os << "  dynamic top-k: " << experts_per_token() << " of " << config_.top_k << " experts per token and layer ("
       << 100 * pruned_fraction() << "% of slots pruned)\n";
  os << "  expert usage (share of slots per layer):\n";
  for (std::size_t l = 0; l < usage_.size(); ++l) {
    int64_t total = 0;
    for (auto c : usage_[l]) total += c;
    os << "    layer " << l << ":";
    for (auto c : usage_[l]) os << ' ' << std::setw(5) << (total ? 100.0 * static_cast<double>(c) / static_cast<double>(total) : 0.0);
    os << '\n';
  }
  return os.str();
}

}  // namespace moerun::runtime

// RouterConfig: routing options beyond plain Mixtral (DESIGN §2). All off by default, so the default
// is exactly the reference math: softmax, top-k, renormalise.
#pragma once
#include <string>

namespace moerun::router {

enum class Overflow { Reroute, Drop };

// Ranges validate() accepts. Outside them the arithmetic is no longer meaningful (a capacity
// factor beyond num_experts already means "no limit").
inline constexpr double kMaxCapacityFactor = 1e6;
inline constexpr double kMaxLoadPenalty = 1e6;
inline constexpr double kMinTemperature = 1e-6;
inline constexpr double kMaxTemperature = 1e6;
// Per-phase capacity defaults when capacity is switched on by a per-phase option alone.
inline constexpr double kDefaultCapacityPrefill = 1.0;
inline constexpr double kDefaultCapacityDecode = 1.25;

struct RouterConfig {
  // Capacity per group of a step (prefill tokens, decode tokens): 0 is no limit, else
  // capacity = ceil(F * tokens * k / experts). Decode groups are small, so ceil() already rounds
  // up there; a larger default (1.25) keeps decode from dropping what prefill would keep.
  double capacity_factor_prefill = 0.0;
  double capacity_factor_decode = 0.0;
  Overflow overflow = Overflow::Reroute;
  double load_penalty = 0.0;  // λ in score - λ·load (load relative to the fair share T·k/E)
  double temperature = 1.0;  // gate softmax temperature
  // Dynamic top-k: per token, the fewest of its top-k experts (in probability order) whose gate
  // probabilities sum to at least P; 1 keeps all k.
  double top_p_experts = 1.0;
  // Set from the model, not options (ModelForward fills them from the config):
  // renormalise the chosen experts' probabilities to sum 1 (Mixtral), or keep them as they are
  // (norm_topk_prob = false: Qwen2-MoE, OLMoE);
  bool renormalize = true;
  // scores: softmax over the experts, or each expert's sigmoid (DeepSeek-V3);
  bool sigmoid = false;
  // group-limited routing: the best `topk_groups` of `groups` equal groups of experts kept, each
  // scored by its best expert or its best two (DeepSeek); 1 group: off;
  int64_t groups = 1, topk_groups = 1;
  bool group_top2 = false;
  // the routed experts' weights times this (DeepSeek's routed_scaling_factor).
  float routed_scaling = 1.0f;

  bool capacity_on() const { return capacity_factor_prefill > 0 || capacity_factor_decode > 0; }
  // Throws ErrorKind::Usage naming the option.
  void validate() const;
};

Overflow parse_overflow(const std::string& s);

}  // namespace moerun::router

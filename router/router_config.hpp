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

struct RouterConfig {
  double capacity_factor = 0.0;  // 0: no capacity limit; else capacity = ceil(F * tokens * k / experts)
  Overflow overflow = Overflow::Reroute;
  double load_penalty = 0.0;     // λ in score - λ·load (load relative to the fair share T·k/E)
  double temperature = 1.0;      // gate softmax temperature
  // Set from the model, not an option: renormalise the chosen experts' probabilities to sum 1
  // (Mixtral), or keep them as they are (norm_topk_prob = false: Qwen2-MoE, OLMoE).
  bool renormalize = true;

  // Throws ErrorKind::Usage naming the option.
  void validate() const;
};

Overflow parse_overflow(const std::string& s);

}  // namespace moerun::router

// Gate and top-k routing (DESIGN §2): logits = W_gate·x in fp32, p = softmax(logits / T) (or a
// sigmoid per expert, DeepSeek-V3), top-k with ties to the lower expert id (inside the best groups
// when routing is group-limited, DeepSeek), weights = top-k probabilities renormalised to sum 1
// (or not) and scaled; then optional load-aware scoring and per-group capacity with reroute/drop.
// Every choice is deterministic.
#pragma once
#include <cstdint>
#include <vector>

#include "base/matmul.hpp"
#include "router/router_config.hpp"

namespace moerun::router {

// Decisions for T tokens: slot (t, k) -> expert id (-1 when dropped or pruned) and combine weight.
struct RoutingDecision {
  int64_t tokens = 0;
  int64_t top_k = 0;
  std::vector<int32_t> expert;  // [T * k]
  std::vector<float> weight;  // [T * k]
  int64_t rerouted = 0;  // slots moved to another expert by capacity
  int64_t dropped = 0;  // slots dropped by capacity
  int64_t pruned = 0;  // slots left empty by dynamic top-k (--top-p-experts)

  // T tokens, k slots each, every slot unassigned (-1, weight 0).
  static RoutingDecision empty(int64_t T, int64_t k) {
    RoutingDecision d;
    d.tokens = T;
    d.top_k = k;
    d.expert.assign(static_cast<std::size_t>(T * k), -1);
    d.weight.assign(d.expert.size(), 0.0f);
    return d;
  }
};

// Kernels on raw spans (CPU reference; the CUDA backend mirrors these signatures).
// probs[t, e] = softmax over e of logits[t, e] / temperature, in fp32.
void gate_softmax(const float* logits, int64_t T, int64_t E, float temperature, float* probs);
// Indices of the k largest of scores[0..E), descending, ties to the lower index.
void top_k_desc(const float* scores, int64_t E, int64_t k, int32_t* out);

// probs[t, e] = sigmoid(logits[t, e] / temperature), in fp32 (DeepSeek-V3's scores).
void gate_sigmoid(const float* logits, int64_t T, int64_t E, float temperature, float* probs);
// Group-limited routing on choice scores [T, E]: per token the experts outside its best `keep` of
// `groups` equal groups (scored by their best expert, or best two with `top2`; ties to the lower
// group) get -inf, so no top-k or reroute picks them.
void mask_groups(float* choice, int64_t T, int64_t E, int64_t groups, int64_t keep, bool top2);
// Routes one group of tokens (one micro-batch's prefill or decode tokens) given their scores, with
// that group's capacity factor (0: no limit). Writes slots [t0*k, (t0+T)*k) of `out`. `choice`
// ranks the experts (top-k, load penalty, reroute): the scores plus any correction bias, groups
// masked; null means `probs`. Weights come from `probs`.
void route_group(const float* probs, const float* choice, int64_t T, int64_t E, int64_t k, const RouterConfig& cfg, double capacity_factor,
                 int64_t t0, RoutingDecision* out);

// The gate network of one layer: fp32 logits through Matmul, then routing. `is_prefill[t]` splits
// the tokens into the prefill and decode groups that capacity treats separately.
// `bias` [E], where the gate linear has one (gpt-oss), is added to the logits; `correction` [E]
// (DeepSeek-V3's e_score_correction_bias) to the scores, for the choice only.
RoutingDecision route(Matmul& mm, const float* x, int64_t T, const WeightMatrix& gate_w, int64_t top_k, const RouterConfig& cfg,
                      const std::vector<uint8_t>& is_prefill, const float* bias = nullptr, const float* correction = nullptr);

}  // namespace moerun::router

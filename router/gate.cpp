// Gate softmax, top-k, load-aware scoring and capacity with overflow.
#include "router/gate.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.hpp"

namespace moerun::router {

Overflow parse_overflow(const std::string& s) {
  if (s == "reroute") return Overflow::Reroute;
  if (s == "drop") return Overflow::Drop;
  fail(ErrorKind::Usage, "--overflow must be reroute or drop, not \"", s, "\"");
}

void RouterConfig::validate() const {
  // Finite ranges: inf or 1e300 would overflow the capacity's float->int conversion, and a
  // temperature below float's range divides logits into inf.
  for (auto [f, name] :
       {std::pair{capacity_factor_prefill, "capacity_factor_prefill"}, std::pair{capacity_factor_decode, "capacity_factor_decode"}})
    if (!(f >= 0 && f <= kMaxCapacityFactor)) fail_config(name, "must be in [0, ", kMaxCapacityFactor, "] (0 = no limit), not ", f);
  if (!(top_p_experts > 0 && top_p_experts <= 1)) fail_config("top_p_experts", "must be in (0, 1], not ", top_p_experts);
  if (!(load_penalty >= 0 && load_penalty <= kMaxLoadPenalty))
    fail_config("load_penalty", "must be in [0, ", kMaxLoadPenalty, "], not ", load_penalty);
  if (!(temperature >= kMinTemperature && temperature <= kMaxTemperature))
    fail_config("temperature", "must be in [", kMinTemperature, ", ", kMaxTemperature, "], not ", temperature);
}

void gate_softmax(const float* logits, int64_t T, int64_t E, float temperature, float* probs) {
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    float* p = probs + t * E;
    // Shift by the largest logit before dividing: (l - max) / T is <= 0 for any T > 0, so exp
    // never overflows and a tiny T gives an arg-max instead of inf - inf = NaN. Identical to
    // l/T - max(l/T) when T = 1.
    float mx = l[0];
    for (int64_t e = 1; e < E; ++e) mx = std::max(mx, l[e]);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp((l[e] - mx) / temperature);
      sum += p[e];
    }
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
  }
}

void gate_sigmoid(const float* logits, int64_t T, int64_t E, float temperature, float* probs) {
  for (int64_t i = 0; i < T * E; ++i) probs[i] = 1.0f / (1.0f + std::exp(-logits[i] / temperature));
}

void mask_groups(float* choice, int64_t T, int64_t E, int64_t groups, int64_t keep, bool top2) {
  if (groups <= 1) return;
  const int64_t size = E / groups;
  std::vector<float> score(static_cast<std::size_t>(groups));
  std::vector<int32_t> kept(static_cast<std::size_t>(keep));
  std::vector<uint8_t> on(static_cast<std::size_t>(groups));
  for (int64_t t = 0; t < T; ++t) {
    float* c = choice + t * E;
    for (int64_t g = 0; g < groups; ++g) {
      float best = -INFINITY, second = -INFINITY;
      for (int64_t e = g * size; e < (g + 1) * size; ++e) {
        if (c[e] > best) {
          second = best;
          best = c[e];
        } else if (c[e] > second) {
          second = c[e];
        }
      }
      score[static_cast<std::size_t>(g)] = top2 ? best + second : best;
    }
    top_k_desc(score.data(), groups, keep, kept.data());
    std::fill(on.begin(), on.end(), 0);
    for (int32_t g : kept) on[static_cast<std::size_t>(g)] = 1;
    for (int64_t e = 0; e < E; ++e)
      if (!on[static_cast<std::size_t>(e / size)]) c[e] = -INFINITY;
  }
}

void top_k_desc(const float* scores, int64_t E, int64_t k, int32_t* out) {
  if (k > 16) {  // a long ordering (reroute ranks every expert): sort, ties to the lower id
    std::vector<int32_t> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [scores](int32_t a, int32_t b) { return scores[a] > scores[b]; });
    std::copy_n(order.begin(), k, out);
    return;
  }
  // The best k so far, in order: one pass over the experts, an insertion where one beats the k-th.
  // Strict '>' keeps ties on the lower id (it was seen first). O(E + inserts * k), not O(E * k^2):
  // 256 experts at top-8 are routed for every token of every layer.
  int64_t n = 0;
  for (int64_t e = 0; e < E; ++e) {
    const float s = scores[e];
    if (n == k && !(s > scores[out[k - 1]])) continue;
    int64_t i = n < k ? n++ : k - 1;
    while (i > 0 && s > scores[out[i - 1]]) {
      out[i] = out[i - 1];
      --i;
    }
    out[i] = static_cast<int32_t>(e);
  }
}

namespace {
// 1. Choice: plain top-k of the choice scores, or sequential load-aware top-k of them - λ·load.
void choose_experts(const float* choice, int64_t T, int64_t E, int64_t k, const RouterConfig& cfg, int32_t* ids) {
  if (cfg.load_penalty <= 0) {
    for (int64_t t = 0; t < T; ++t) top_k_desc(choice + t * E, E, k, ids + t * k);
    return;
  }
  std::vector<int64_t> load(static_cast<std::size_t>(E), 0);
  std::vector<float> score(static_cast<std::size_t>(E));
  const double fair = std::max(1.0, static_cast<double>(T * k) / static_cast<double>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e)
      score[e] = choice[t * E + e] - static_cast<float>(cfg.load_penalty * static_cast<double>(load[e]) / fair);
    top_k_desc(score.data(), E, k, ids + t * k);
    for (int64_t j = 0; j < k; ++j) ++load[ids[t * k + j]];
  }
}

// 1b. Dynamic top-k: keep the most probable of the chosen experts until their mass reaches P.
//     Pruned slots are empty (-1) from here on, so capacity never counts them. Sigmoid scores do
//     not sum to 1 over the experts: their mass is taken over the chosen ones.
void prune_to_top_p(const float* probs, int64_t T, int64_t E, int64_t k, const RouterConfig& cfg, int32_t* ids, RoutingDecision* out) {
  std::vector<int32_t> by_prob(static_cast<std::size_t>(k));
  for (int64_t t = 0; t < T; ++t) {
    int32_t* slot = ids + t * k;
    const float* p = probs + t * E;
    by_prob.assign(slot, slot + k);
    std::stable_sort(by_prob.begin(), by_prob.end(), [p](int32_t a, int32_t b) { return p[a] > p[b]; });
    double total = 1, mass = 0;
    if (cfg.sigmoid) {
      total = 0;
      for (int64_t j = 0; j < k; ++j) total += p[slot[j]];
    }
    int64_t keep = 0;
    while (keep < k && mass < cfg.top_p_experts * total) mass += p[by_prob[static_cast<std::size_t>(keep++)]];
    for (int64_t j = 0; j < k; ++j)
      if (std::find(by_prob.begin(), by_prob.begin() + keep, slot[j]) == by_prob.begin() + keep) {
        slot[j] = -1;
        ++out->pruned;
      }
  }
}

// 2. Capacity: slot-major priority (every token's first choice before any second choice); an
//    overflowing slot is rerouted to the best expert with room or dropped, and marked in `moved`.
void apply_capacity(const float* choice, int64_t T, int64_t E, int64_t k, const RouterConfig& cfg, double capacity_factor,
                    const std::vector<int32_t>& original, int32_t* ids, std::vector<uint8_t>& moved, RoutingDecision* out) {
  // Never more than every slot of the group: larger factors mean no limit, and the double stays
  // within int64 range before the conversion.
  const double want = std::ceil(capacity_factor * static_cast<double>(T * k) / static_cast<double>(E));
  const int64_t cap = static_cast<int64_t>(std::min(want, static_cast<double>(T * k)));
  std::vector<int64_t> count(static_cast<std::size_t>(E), 0);
  std::vector<int32_t> order(static_cast<std::size_t>(E));
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t t = 0; t < T; ++t) {
      int32_t& slot = ids[t * k + j];
      if (slot < 0) continue;  // pruned by dynamic top-k
      if (count[slot] < cap) {
        ++count[slot];
        continue;
      }
      int32_t chosen = -1;
      if (cfg.overflow == Overflow::Reroute) {
        top_k_desc(choice + t * E, E, E, order.data());
        for (int32_t e : order) {
          if (count[e] >= cap || choice[t * E + e] == -INFINITY) continue;  // not in a kept group
          bool used = false;
          for (int64_t i = 0; i < k; ++i) used |= original[t * k + i] == e || (i < j && ids[t * k + i] == e);
          if (used) continue;
          chosen = e;
          break;
        }
      }
      slot = chosen;
      moved[t * k + j] = 1;
      if (chosen >= 0) {
        ++count[chosen];
        ++out->rerouted;
      } else {
        ++out->dropped;
      }
    }
  }
}

// 3. Weights: the chosen experts' probabilities renormalised over the original top-k (so a
//    dropped slot weighs 0 and the others keep their Mixtral weights), or, when a slot was
//    rerouted, over the final set of experts; without renormalisation, the probabilities as they are.
void set_weights(const float* probs, int64_t T, int64_t E, int64_t k, const RouterConfig& cfg, const std::vector<int32_t>& original,
                 const int32_t* ids, const std::vector<uint8_t>& moved, float* wts) {
  for (int64_t t = 0; t < T; ++t) {
    const float* p = probs + t * E;
    bool any_rerouted = false;
    for (int64_t j = 0; j < k; ++j) any_rerouted |= moved[t * k + j] && ids[t * k + j] >= 0;
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = any_rerouted ? ids[t * k + j] : original[t * k + j];
      if (e >= 0) sum += p[e];
    }
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      const float w = e < 0 ? 0.0f : !cfg.renormalize ? p[e] : sum > 0 ? p[e] / sum : 0.0f;
      wts[t * k + j] = cfg.routed_scaling == 1.0f ? w : w * cfg.routed_scaling;
    }
  }
}

}  // namespace

void route_group(const float* probs, const float* choice, int64_t T, int64_t E, int64_t k, const RouterConfig& cfg, double capacity_factor,
                 int64_t t0, RoutingDecision* out) {
  int32_t* ids = out->expert.data() + t0 * k;
  if (!choice) choice = probs;
  choose_experts(choice, T, E, k, cfg, ids);
  if (cfg.top_p_experts < 1) prune_to_top_p(probs, T, E, k, cfg, ids, out);
  std::vector<uint8_t> moved(static_cast<std::size_t>(T * k), 0);
  const std::vector<int32_t> original(ids, ids + T * k);
  if (capacity_factor > 0) apply_capacity(choice, T, E, k, cfg, capacity_factor, original, ids, moved, out);
  set_weights(probs, T, E, k, cfg, original, ids, moved, out->weight.data() + t0 * k);
}

RoutingDecision route(Matmul& mm, const float* x, int64_t T, const WeightMatrix& gate_w, int64_t top_k, const RouterConfig& cfg,
                      const std::vector<uint8_t>& is_prefill, const float* bias, const float* correction) {
  const int64_t E = gate_w.rows;
  std::vector<float> logits(static_cast<std::size_t>(T * E)), probs(logits.size());
  mm.linear(x, T, gate_w, logits.data());
  if (bias)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < E; ++e) logits[static_cast<std::size_t>(t * E + e)] += bias[e];
  if (cfg.sigmoid)
    gate_sigmoid(logits.data(), T, E, static_cast<float>(cfg.temperature), probs.data());
  else
    gate_softmax(logits.data(), T, E, static_cast<float>(cfg.temperature), probs.data());
  // The choice scores: the scores plus the correction bias, outside the best groups -inf.
  std::vector<float> choice;
  if (correction || cfg.groups > 1) {
    choice = probs;
    if (correction)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t e = 0; e < E; ++e) choice[static_cast<std::size_t>(t * E + e)] += correction[e];
    mask_groups(choice.data(), T, E, cfg.groups, cfg.topk_groups, cfg.group_top2);
  }
  const float* ch = choice.empty() ? nullptr : choice.data();
  RoutingDecision d = RoutingDecision::empty(T, top_k);
  if (!cfg.capacity_on() && cfg.load_penalty <= 0) {
    route_group(probs.data(), ch, T, E, top_k, cfg, 0.0, 0, &d);
    return d;
  }
  // Capacity and load are per group: gather prefill and decode tokens separately.
  for (uint8_t group : {uint8_t{1}, uint8_t{0}}) {
    std::vector<int64_t> rows;
    for (int64_t t = 0; t < T; ++t)
      if (is_prefill[static_cast<std::size_t>(t)] == group) rows.push_back(t);
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    std::vector<float> gp(static_cast<std::size_t>(n * E)), gc(ch ? gp.size() : 0);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(probs.data() + rows[i] * E, E, gp.data() + i * E);
      if (ch) std::copy_n(ch + rows[i] * E, E, gc.data() + i * E);
    }
    RoutingDecision g = RoutingDecision::empty(n, top_k);
    route_group(gp.data(), ch ? gc.data() : nullptr, n, E, top_k, cfg, group ? cfg.capacity_factor_prefill : cfg.capacity_factor_decode, 0,
                &g);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < top_k; ++j) {
        d.expert[rows[i] * top_k + j] = g.expert[i * top_k + j];
        d.weight[rows[i] * top_k + j] = g.weight[i * top_k + j];
      }
    d.rerouted += g.rerouted;
    d.dropped += g.dropped;
    d.pruned += g.pruned;
  }
  return d;
}

}  // namespace moerun::router

// Gate softmax, top-k ties, renormalised weights, capacity with both overflow policies and the
// load penalty, on cases small enough to derive by hand.
#include <gtest/gtest.h>

#include "base/error.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "router/gate.hpp"

namespace moerun::router {
namespace {

TEST(Gate, SoftmaxMatchesFp64) {
  const float logits[6] = {0.5f, -1.0f, 2.0f, 0.0f, 0.0f, 3.0f};
  float p[6];
  gate_softmax(logits, 2, 3, 1.0f, p);
  for (int t = 0; t < 2; ++t) {
    double z = 0;
    for (int e = 0; e < 3; ++e) z += std::exp(static_cast<double>(logits[t * 3 + e]));
    for (int e = 0; e < 3; ++e) EXPECT_NEAR(p[t * 3 + e], std::exp(static_cast<double>(logits[t * 3 + e])) / z, 1e-7);
  }
  // Temperature 2 equals softmax of logits / 2.
  float p2[3], half[3] = {0.25f, -0.5f, 1.0f}, q[3];
  gate_softmax(logits, 1, 3, 2.0f, p2);
  gate_softmax(half, 1, 3, 1.0f, q);
  for (int e = 0; e < 3; ++e) EXPECT_NEAR(p2[e], q[e], 1e-7);
}

TEST(Gate, TopKTiesGoToLowerId) {
  const float s[5] = {0.1f, 0.3f, 0.3f, 0.05f, 0.3f};
  int32_t out[3];
  top_k_desc(s, 5, 3, out);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 2);
  EXPECT_EQ(out[2], 4);
}

// The fast selection against a full stable sort (descending, ties to the lower id), with many ties
// and -inf entries (masked groups), at DeepSeek-V3's 256 experts: top-8, and the whole order.
TEST(Gate, TopKEqualsAStableSortAt256Experts) {
  std::mt19937 rng(4);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> s(256);
    for (float& v : s) v = static_cast<float>(rng() % 23) * 0.125f;  // many equal values
    for (int i = 0; i < 256; i += 7 + trial % 5) s[static_cast<std::size_t>(i)] = -INFINITY;
    std::vector<int32_t> want(256);
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    for (int64_t k : {1, 6, 8, 16, 17, 256}) {
      std::vector<int32_t> got(static_cast<std::size_t>(k));
      top_k_desc(s.data(), 256, k, got.data());
      ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "trial " << trial << ", k " << k;
    }
  }
}

RoutingDecision run(const std::vector<float>& probs, int64_t T, int64_t E, int64_t k, const RouterConfig& cfg, double capacity = 0) {
  RoutingDecision d = RoutingDecision::empty(T, k);
  route_group(probs.data(), nullptr, T, E, k, cfg, capacity, 0, &d);
  return d;
}

TEST(Gate, PlainTop2RenormalisesWeights) {
  const std::vector<float> p = {0.1f, 0.5f, 0.3f, 0.1f};
  const RoutingDecision d = run(p, 1, 4, 2, {});
  EXPECT_EQ(d.expert[0], 1);
  EXPECT_EQ(d.expert[1], 2);
  EXPECT_NEAR(d.weight[0], 0.5 / 0.8, 1e-7);
  EXPECT_NEAR(d.weight[1], 0.3 / 0.8, 1e-7);
}

// 4 tokens, 2 experts, top-1, all prefer expert 0. capacity = ceil(1.0 * 4 * 1 / 2) = 2.
const std::vector<float> kCrowded = {0.9f, 0.1f, 0.8f, 0.2f, 0.7f, 0.3f, 0.6f, 0.4f};

TEST(Gate, CapacityRerouteMovesOverflowToNextBest) {
  RouterConfig cfg;
  cfg.overflow = Overflow::Reroute;
  const RoutingDecision d = run(kCrowded, 4, 2, 1, cfg, 1.0);
  EXPECT_EQ(d.expert, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(d.rerouted, 2);
  EXPECT_EQ(d.dropped, 0);
  // Top-1 weights renormalise over the single final expert.
  for (float w : d.weight) EXPECT_FLOAT_EQ(w, 1.0f);
}

TEST(Gate, CapacityDropZeroesOverflow) {
  RouterConfig cfg;
  cfg.overflow = Overflow::Drop;
  const RoutingDecision d = run(kCrowded, 4, 2, 1, cfg, 1.0);
  EXPECT_EQ(d.expert, (std::vector<int32_t>{0, 0, -1, -1}));
  EXPECT_EQ(d.dropped, 2);
  EXPECT_FLOAT_EQ(d.weight[2], 0.0f);
  EXPECT_FLOAT_EQ(d.weight[0], 1.0f);
}

TEST(Gate, CapacityFirstChoicesHavePriorityOverSecond) {
  // 2 tokens, 3 experts, top-2, capacity ceil(0.75 * 2 * 2 / 3) = 1 per expert.
  // Token 0 prefers 0 then 1; token 1 prefers 1 then 0. First choices fit; second choices are full
  // (0 and 1 taken), so both reroute to expert 2 in token order: token 0 gets it, token 1 drops.
  const std::vector<float> p = {0.6f, 0.3f, 0.1f, 0.3f, 0.6f, 0.1f};
  const RoutingDecision d = run(p, 2, 3, 2, {}, 0.75);
  EXPECT_EQ(d.expert, (std::vector<int32_t>{0, 2, 1, -1}));
  EXPECT_EQ(d.rerouted, 1);
  EXPECT_EQ(d.dropped, 1);
  EXPECT_NEAR(d.weight[0], 0.6 / 0.7, 1e-6);  // rerouted: renormalised over {0, 2}
  EXPECT_NEAR(d.weight[1], 0.1 / 0.7, 1e-6);
  EXPECT_NEAR(d.weight[2], 0.6 / 0.9, 1e-6);  // dropped slot keeps the other's Mixtral weight
  EXPECT_FLOAT_EQ(d.weight[3], 0.0f);
}

TEST(Gate, LoadPenaltySpreadsTokens) {
  // 4 identical tokens preferring expert 0 slightly; λ large enough to alternate.
  const std::vector<float> p = {0.55f, 0.45f, 0.55f, 0.45f, 0.55f, 0.45f, 0.55f, 0.45f};
  RouterConfig cfg;
  cfg.load_penalty = 1.0;
  const RoutingDecision d = run(p, 4, 2, 1, cfg);
  // fair share = 2; token 0 -> 0; token 1: 0.55 - 0.5 < 0.45 -> 1; token 2: tie-free 0.05 vs -0.05 -> 0; ...
  EXPECT_EQ(d.expert, (std::vector<int32_t>{0, 1, 0, 1}));
  const RoutingDecision plain = run(p, 4, 2, 1, {});
  EXPECT_EQ(plain.expert, (std::vector<int32_t>{0, 0, 0, 0}));
}

TEST(Gate, RouteSplitsPrefillAndDecodeGroups) {
  // Gate weights pick expert 0 for every token; capacity 1 per group of 2 tokens (top-1, 2 experts).
  Matmul mm;
  WeightMatrix g;
  g.allocate(DType::F32, 2, 2);
  float* w = g.data.as<float>();
  w[0] = 1;
  w[1] = 0;
  w[2] = 0;
  w[3] = 0;  // logit_0 = x0, logit_1 = 0
  const std::vector<float> x = {1, 0, 1, 0, 1, 0, 1, 0};
  RouterConfig cfg;
  cfg.capacity_factor_prefill = cfg.capacity_factor_decode = 1.0;
  cfg.overflow = Overflow::Drop;
  const RoutingDecision d = route(mm, x.data(), 4, g, 1, cfg, {1, 0, 1, 0});
  // Group prefill = tokens {0, 2}, decode = {1, 3}: each group's first token gets expert 0.
  EXPECT_EQ(d.expert, (std::vector<int32_t>{0, 0, -1, -1}));

  // Per-phase factors: prefill 1.0 keeps capacity 1; decode 2.0 gives ceil(2 * 2 / 2) = 2, so both
  // decode tokens keep expert 0.
  cfg.capacity_factor_decode = 2.0;
  const RoutingDecision p = route(mm, x.data(), 4, g, 1, cfg, {1, 0, 1, 0});
  EXPECT_EQ(p.expert, (std::vector<int32_t>{0, 0, -1, 0}));
  EXPECT_EQ(p.dropped, 1);
  // Capacity on decode only: prefill is unlimited.
  cfg.capacity_factor_prefill = 0;
  cfg.capacity_factor_decode = 1.0;
  const RoutingDecision q = route(mm, x.data(), 4, g, 1, cfg, {1, 0, 1, 0});
  EXPECT_EQ(q.expert, (std::vector<int32_t>{0, 0, 0, -1}));
}

TEST(Gate, DynamicTopKKeepsFewestExpertsReachingMass) {
  // Top-3 of 4. Token 0: 0.7 alone reaches P = 0.6. Token 1: 0.4 + 0.35 = 0.75 reaches it with 2.
  // Token 2: 0.3 + 0.25 + 0.25 = 0.8 needs all 3 (capped at k).
  const std::vector<float> p = {0.7f, 0.1f,  0.15f, 0.05f,  //
                                0.1f, 0.4f,  0.15f, 0.35f,  //
                                0.3f, 0.25f, 0.25f, 0.2f};
  RouterConfig cfg;
  cfg.top_p_experts = 0.6;
  const RoutingDecision d = run(p, 3, 4, 3, cfg);
  EXPECT_EQ(d.expert, (std::vector<int32_t>{0, -1, -1, 1, 3, -1, 0, 1, 2}));
  EXPECT_EQ(d.pruned, 3);
  // Renormalised over the experts kept.
  EXPECT_FLOAT_EQ(d.weight[0], 1.0f);
  EXPECT_NEAR(d.weight[3], 0.4 / 0.75, 1e-6);
  EXPECT_NEAR(d.weight[4], 0.35 / 0.75, 1e-6);
  EXPECT_NEAR(d.weight[6], 0.3 / 0.8, 1e-6);
  EXPECT_FLOAT_EQ(d.weight[1], 0.0f);
  // Without renormalisation the kept experts keep their probabilities.
  cfg.renormalize = false;
  const RoutingDecision raw = run(p, 3, 4, 3, cfg);
  EXPECT_FLOAT_EQ(raw.weight[0], 0.7f);
  EXPECT_FLOAT_EQ(raw.weight[4], 0.35f);
  // P = 1 is plain top-k: nothing pruned.
  cfg.top_p_experts = 1.0;
  EXPECT_EQ(run(p, 3, 4, 3, cfg).pruned, 0);
}

TEST(Gate, DynamicTopKPrunedSlotsNeverTakeCapacity) {
  // 4 tokens, 2 experts, top-2, capacity ceil(0.5 * 4 * 2 / 2) = 2. Every token's first choice is
  // expert 0 with 0.9, so P = 0.8 prunes every second slot: expert 0 would take 4 first choices,
  // 2 fit, 2 reroute to expert 1 (which has room because the pruned slots did not count).
  const std::vector<float> p = {0.9f, 0.1f, 0.9f, 0.1f, 0.9f, 0.1f, 0.9f, 0.1f};
  RouterConfig cfg;
  cfg.top_p_experts = 0.8;
  const RoutingDecision d = run(p, 4, 2, 2, cfg, 0.5);
  EXPECT_EQ(d.expert, (std::vector<int32_t>{0, -1, 0, -1, 1, -1, 1, -1}));
  EXPECT_EQ(d.pruned, 4);
  EXPECT_EQ(d.rerouted, 2);
  EXPECT_EQ(d.dropped, 0);
}

TEST(Gate, RouterOptionRanges) {
  RouterConfig cfg;
  cfg.top_p_experts = 0;
  EXPECT_THROW(cfg.validate(), Error);
  cfg.top_p_experts = 1.5;
  EXPECT_THROW(cfg.validate(), Error);
  cfg.top_p_experts = 0.5;
  cfg.capacity_factor_decode = -1;
  EXPECT_THROW(cfg.validate(), Error);
  cfg.capacity_factor_decode = 1.25;
  EXPECT_NO_THROW(cfg.validate());
}

// DeepSeek-V3's routing, by hand: 8 experts in 4 groups of 2, keep 2 groups, top-2. Scores are
// sigmoids; the correction bias changes the choice, not the weights; groups score by their best two.
TEST(Gate, SigmoidGroupLimitedWithCorrectionBias) {
  //                         g0          g1          g2          g3
  const float logits[8] = {2.0f, -3.0f, 0.5f, 0.4f, 1.0f, 0.9f, -1.0f, 3.0f};
  const float corr[8] = {0, 0, 0, 0, 0, 0, 0.5f, -2.0f};
  float s[8];
  gate_sigmoid(logits, 1, 8, 1.0f, s);
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(s[e], 1 / (1 + std::exp(-static_cast<double>(logits[e]))), 1e-7);
  // choice = s + corr: g0 = .881 + .047 = .928, g1 = .622 + .599 = 1.221, g2 = .731 + .711 = 1.442,
  // g3 = (.269 + .5) + (.953 - 2) = -.278: groups 2 and 1 are kept.
  float choice[8];
  for (int e = 0; e < 8; ++e) choice[e] = s[e] + corr[e];
  mask_groups(choice, 1, 8, 4, 2, true);
  for (int e : {0, 1, 6, 7}) EXPECT_EQ(choice[e], -INFINITY) << e;
  for (int e : {2, 3, 4, 5}) EXPECT_GT(choice[e], 0.5f) << e;
  RouterConfig cfg;
  cfg.sigmoid = true;
  cfg.renormalize = true;
  cfg.routed_scaling = 2.5f;
  RoutingDecision d = RoutingDecision::empty(1, 2);
  route_group(s, choice, 1, 8, 2, cfg, 0, 0, &d);
  // Expert 0 has the best score but its group lost; 4 and 5 win inside the kept groups.
  EXPECT_EQ(d.expert[0], 4);
  EXPECT_EQ(d.expert[1], 5);
  const double s4 = 1 / (1 + std::exp(-1.0)), s5 = 1 / (1 + std::exp(-0.9));
  EXPECT_NEAR(d.weight[0], 2.5 * s4 / (s4 + s5), 1e-6);
  EXPECT_NEAR(d.weight[1], 2.5 * s5 / (s4 + s5), 1e-6);
  // Without renormalisation the weights are the raw sigmoids, scaled.
  cfg.renormalize = false;
  d = RoutingDecision::empty(1, 2);
  route_group(s, choice, 1, 8, 2, cfg, 0, 0, &d);
  EXPECT_NEAR(d.weight[0], 2.5 * s4, 1e-6);
}

// DeepSeek-V2's group_limited_greedy: softmax scores, a group scores by its best expert. With one
// group kept, the top-2 come from it even when another group holds the single best expert's runner-up.
TEST(Gate, SoftmaxGroupLimitedByBestExpert) {
  // 6 experts in 3 groups of 2: g0 {.30, .02}, g1 {.25, .24}, g2 {.10, .09}.
  const std::vector<float> p = {0.30f, 0.02f, 0.25f, 0.24f, 0.10f, 0.09f};
  std::vector<float> choice = p;
  mask_groups(choice.data(), 1, 6, 3, 1, false);  // by max: g0 (.30) wins; by top-2 sum g1 (.49) would
  RouterConfig cfg;
  cfg.renormalize = false;
  RoutingDecision d = RoutingDecision::empty(1, 2);
  route_group(p.data(), choice.data(), 1, 6, 2, cfg, 0, 0, &d);
  EXPECT_EQ(d.expert[0], 0);
  EXPECT_EQ(d.expert[1], 1);
  EXPECT_FLOAT_EQ(d.weight[1], 0.02f);
  std::vector<float> by_sum = p;
  mask_groups(by_sum.data(), 1, 6, 3, 1, true);
  d = RoutingDecision::empty(1, 2);
  route_group(p.data(), by_sum.data(), 1, 6, 2, cfg, 0, 0, &d);
  EXPECT_EQ(d.expert[0], 2);
  EXPECT_EQ(d.expert[1], 3);
}

// Capacity on top of group-limited routing reroutes only inside the kept groups, and drops when
// they are full.
TEST(Gate, CapacityReroutesInsideTheKeptGroups) {
  // 2 tokens, 4 experts in 2 groups; both tokens keep group 0 only; top-1; capacity 1 each.
  const std::vector<float> p = {0.5f, 0.3f, 0.1f, 0.1f, 0.6f, 0.2f, 0.1f, 0.1f};
  std::vector<float> choice = p;
  mask_groups(choice.data(), 2, 4, 2, 1, false);
  RouterConfig cfg;
  cfg.overflow = Overflow::Reroute;
  RoutingDecision d = RoutingDecision::empty(2, 1);
  route_group(p.data(), choice.data(), 2, 4, 1, cfg, 0.5, 0, &d);  // cap = ceil(0.5 * 2 / 4) = 1
  EXPECT_EQ(d.expert[0], 0);
  EXPECT_EQ(d.expert[1], 1) << "rerouted to the next expert of its kept group, not to group 1";
  EXPECT_EQ(d.rerouted, 1);
}

}  // namespace
}  // namespace moerun::router

// experts/cache_policy alone: each prefetch policy's guesses, the keep scores victims are chosen
// by, hotness and its settle, without slots, loaders or tiers (experts/expert_cache's tests run
// them together).
#include <gtest/gtest.h>

#include <cmath>

#include "experts/cache_policy.hpp"

namespace moerun::experts {
namespace {

constexpr int64_t kLayers = 3, kExperts = 4;
auto all = [](int64_t, int64_t) { return true; };
int64_t key(int64_t l, int64_t e) {
  return l * kExperts + e;
}

std::vector<int64_t> keys(const std::vector<ScoredExpert>& v) {
  std::vector<int64_t> out;
  for (const ScoredExpert& s : v) out.push_back(s.key);
  return out;
}

TEST(CachePolicy, LruGuessesWhatTheNextLayerUsedLastTime) {
  CachePolicy p(PrefetchPolicy::Lru, WarmupPolicy::None, kLayers, kExperts, nullptr, all);
  p.layer_begins(1, {0, 3, 0, 1});
  const PrefetchPlan plan = p.plan_prefetch(0, {1, 0, 0, 0}, 0, 0);
  EXPECT_FALSE(plan.skip);
  EXPECT_EQ(keys(plan.l1), (std::vector<int64_t>{key(1, 1), key(1, 3)}));
  EXPECT_TRUE(plan.l2.empty());
  EXPECT_EQ(p.keep_score(key(1, 1), 0), 0.0) << "lru keeps by recent use alone";
}

TEST(CachePolicy, LruBacksOffWhereRoutingDoesNotRepeat) {
  CachePolicy p(PrefetchPolicy::Lru, WarmupPolicy::None, kLayers, kExperts, nullptr, all);
  p.layer_begins(1, {1, 1, 1, 1});
  int guessed = 0;
  for (int i = 0; i < 16; ++i) guessed += !p.plan_prefetch(0, {1, 0, 0, 0}, 64, 12).skip;  // 12 of 64 used: under a fifth
  EXPECT_EQ(guessed, 2) << "every eighth layer still guesses";
  EXPECT_FALSE(p.plan_prefetch(0, {1, 0, 0, 0}, 64, 13).skip) << "a fifth used: every layer";
}

TEST(CachePolicy, GateFollowsTheRoutersHintThenFallsBackToLru) {
  CachePolicy p(PrefetchPolicy::Gate, WarmupPolicy::Hotness, kLayers, kExperts, nullptr, [](int64_t, int64_t e) { return e != 2; });
  p.hint(1, {0, 5, 7, 15});
  p.hint(1, {0, 0, 1, 0});  // micro-batches add up
  const PrefetchPlan plan = p.plan_prefetch(0, {1, 0, 0, 0}, 0, 0);
  EXPECT_EQ(keys(plan.l1), (std::vector<int64_t>{key(1, 3), key(1, 1)})) << "likeliest first, expert 2 not this rank's";
  EXPECT_DOUBLE_EQ(plan.l1[0].score, 15.0 / 28);
  EXPECT_GE(p.keep_score(key(1, 3), 0), 1e12) << "a predicted expert outranks any hotness";
  EXPECT_FALSE(p.may_displace(LoadKind::Prefetch, 0.5, 1e12 + 0.1)) << "a guess does not evict another guess";
  EXPECT_TRUE(p.may_displace(LoadKind::Prefetch, 0.5, 40.0));
  p.layer_begins(1, {2, 0, 0, 0});  // the layer came: its hint is spent, lru remembers expert 0
  EXPECT_EQ(keys(p.plan_prefetch(0, {1, 0, 0, 0}, 0, 0).l1), (std::vector<int64_t>{key(1, 0)}));
}

TEST(CachePolicy, HotnessDecaysAndSettlesOnTheHottest) {
  CachePolicy p(PrefetchPolicy::Off, WarmupPolicy::Hotness, kLayers, kExperts, nullptr, all);
  EXPECT_TRUE(p.plan_prefetch(0, {1, 1, 1, 1}, 0, 0).skip) << "prefetch off";
  p.layer_routed(0, {2048, 0, 0, 0});
  p.layer_routed(0, {0, 10, 0, 0});  // 10 rows routed: every expert of layer 0 decays by 0.5^(10/2048)
  const double decay = std::pow(0.5, 10.0 / 2048);
  EXPECT_DOUBLE_EQ(p.keep_score(key(0, 0), 0), 2048 * decay);
  EXPECT_DOUBLE_EQ(p.keep_score(key(0, 1), 0), 10.0);
  p.layer_routed(2, {0, 0, 0, 10});
  EXPECT_EQ(keys(p.hottest(2)), (std::vector<int64_t>{key(0, 0), key(0, 1)})) << "hottest first, ties by key";
  EXPECT_EQ(keys(p.hottest(9)), (std::vector<int64_t>{key(0, 0), key(0, 1), key(2, 3)})) << "only experts with rows";
  EXPECT_FALSE(p.may_displace(LoadKind::Fill, 10.0, 10.0)) << "a warm-up fill displaces only a colder expert";
  EXPECT_TRUE(p.may_displace(LoadKind::Fill, 10.0, 9.0));
  EXPECT_TRUE(p.may_displace(LoadKind::Demand, 0.0, 1e13));
}

TEST(CachePolicy, AffinityPredictsTheNextLayerAndTheOneAfterIntoL2) {
  io::AffinityGraph g;  // 3 layers x 4 experts: expert e leads to expert e at the next layer
  g.num_layers = kLayers;
  g.num_experts = kExperts;
  g.top_k = 1;
  g.tokens = 100;
  g.next.assign(static_cast<std::size_t>((kLayers - 1) * kExperts * kExperts), 0.0);
  g.next_counts.assign(g.next.size(), 0);
  for (int64_t l = 0; l + 1 < kLayers; ++l)
    for (int64_t e = 0; e < kExperts; ++e) {
      g.next[static_cast<std::size_t>((l * kExperts + e) * kExperts + e)] = 1.0;
      g.next_counts[static_cast<std::size_t>((l * kExperts + e) * kExperts + e)] = 25;
    }
  g.frequency.assign(static_cast<std::size_t>(kLayers * kExperts), 0.25);
  g.coactivation.assign(static_cast<std::size_t>(kLayers * kExperts * kExperts), 0.0);
  g.coactivation_counts.assign(g.coactivation.size(), 0);
  CachePolicy p(PrefetchPolicy::Affinity, WarmupPolicy::None, kLayers, kExperts, &g, all);
  const PrefetchPlan plan = p.plan_prefetch(0, {3, 1, 0, 0}, 0, 0);  // layer 0 routed 3 rows to expert 0, 1 to expert 1
  ASSERT_GE(plan.l1.size(), 2u);
  EXPECT_EQ(plan.l1[0].key, key(1, 0));
  EXPECT_DOUBLE_EQ(plan.l1[0].score, 0.75);
  EXPECT_EQ(plan.l1[1].key, key(1, 1));
  EXPECT_EQ(keys(plan.l2), (std::vector<int64_t>{key(2, 0), key(2, 1)})) << "the layer after next, into L2";
  EXPECT_DOUBLE_EQ(p.keep_score(key(1, 0), 0), 1.75) << "predicted: 1 + its share";
  EXPECT_DOUBLE_EQ(p.keep_score(key(2, 0), 0), 1.375) << "two layers ahead: half its share";
  EXPECT_DOUBLE_EQ(p.keep_score(key(0, 3), 1), 0.25 * 0.5 * 0.5) << "unpredicted: its frequency, halved per layer away";
  EXPECT_FALSE(p.may_displace(LoadKind::Prefetch, 0.5, 1.5)) << "a guess evicts only what is worth less";
}

}  // namespace
}  // namespace moerun::experts

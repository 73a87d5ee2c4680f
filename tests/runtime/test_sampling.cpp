// Sampling: greedy ties, determinism per (seed, step), top-p restricting the support, and the
// empirical distribution at temperature 1 against the softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "runtime/sampling.hpp"

namespace moerun::runtime {
namespace {

TEST(Sampling, GreedyTiesGoToLowerId) {
  const float l[4] = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(l, 4), 1);
  EXPECT_EQ(sample_token(l, 4, 0.0, 1.0, 7, 0), 1);
}

// The vector argmax against the scalar rule written out (first strict maximum, NaN never wins, a
// NaN or -inf first element kept when nothing beats it), at lengths around 16 lanes, with ties
// across lanes, NaNs and infinities.
TEST(Sampling, ArgmaxIsTheFirstStrictMaximum) {
  const auto scalar = [](const std::vector<float>& l) {
    int64_t best = 0;
    for (int64_t i = 1; i < static_cast<int64_t>(l.size()); ++i)
      if (l[static_cast<std::size_t>(i)] > l[static_cast<std::size_t>(best)]) best = i;
    return static_cast<int32_t>(best);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(5);
  for (int64_t V : {1, 2, 15, 16, 17, 33, 100, 32000}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::uniform_int_distribution<int> level(0, trial % 4 == 0 ? 3 : 1000);  // few levels: many ties
      std::vector<float> l(static_cast<std::size_t>(V));
      for (float& x : l) x = static_cast<float>(level(rng));
      std::uniform_int_distribution<int64_t> at(0, V - 1);
      if (trial % 5 == 1) l[static_cast<std::size_t>(at(rng))] = nan;
      if (trial % 5 == 2) l[0] = nan;
      if (trial % 5 == 3) std::fill(l.begin(), l.end(), -inf);
      if (trial % 5 == 4) l[static_cast<std::size_t>(at(rng))] = inf;
      if (trial % 7 == 6) l[0] = -inf;
      EXPECT_EQ(argmax(l.data(), V), scalar(l)) << "V " << V << ", trial " << trial;
    }
  }
}

TEST(Sampling, DeterministicPerSeedAndStep) {
  const float l[5] = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f};
  for (int step = 0; step < 20; ++step) EXPECT_EQ(sample_token(l, 5, 1.0, 1.0, 42, step), sample_token(l, 5, 1.0, 1.0, 42, step));
  int differ = 0;
  for (int step = 0; step < 50; ++step) differ += sample_token(l, 5, 1.0, 1.0, 1, step) != sample_token(l, 5, 1.0, 1.0, 2, step);
  EXPECT_GT(differ, 10);
}

TEST(Sampling, TopPKeepsOnlyTheNucleus) {
  // softmax of {0, 0, log 8}: p = {0.1, 0.1, 0.8}; top_p 0.8 keeps only id 2.
  const float l[3] = {0.0f, 0.0f, std::log(8.0f)};
  for (int step = 0; step < 200; ++step) EXPECT_EQ(sample_token(l, 3, 1.0, 0.8, 3, step), 2);
}

TEST(Sampling, FrequenciesFollowSoftmax) {
  const float l[3] = {0.0f, std::log(2.0f), std::log(7.0f)};  // p = {0.1, 0.2, 0.7}
  std::vector<int> count(3, 0);
  const int N = 20000;
  for (int step = 0; step < N; ++step) ++count[sample_token(l, 3, 1.0, 1.0, 9, step)];
  EXPECT_NEAR(count[0] / double(N), 0.1, 0.01);
  EXPECT_NEAR(count[1] / double(N), 0.2, 0.015);
  EXPECT_NEAR(count[2] / double(N), 0.7, 0.015);
}

}  // namespace
}  // namespace moerun::runtime

namespace moerun::runtime {
namespace {

// The sampling fields (issue 79): hand-derived cases of vLLM's definitions.
TEST(SamplingFields, BiasAndPenaltiesAdjustTheLogitsAsDefined) {
  const float l[5] = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f};
  io::SamplingFields f;
  f.logit_bias = {{1, 4.0f}};
  f.repetition_penalty = 2.0;  // prompt {0} and output {1, 3, 3}: 2 / 2, (-1 + 4) / 2, 3 / 2
  f.presence_penalty = 0.5;  // output tokens 1 and 3, once each
  f.frequency_penalty = 0.25;  // token 3 twice, token 1 once
  const std::vector<int32_t> prompt{0}, output{1, 3, 3};
  float out[5];
  adjust_logits(l, 5, f, prompt, output, out);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 1.5f - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(out[2], 0.5f);
  EXPECT_FLOAT_EQ(out[3], 1.5f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(out[4], 1.0f);
  // A negative logit of a repeated token is multiplied: further from being chosen.
  const float neg[2] = {-1.0f, -2.0f};
  io::SamplingFields r;
  r.repetition_penalty = 1.5;
  const std::vector<int32_t> none, seen{0};
  adjust_logits(neg, 2, r, seen, none, out);
  EXPECT_FLOAT_EQ(out[0], -1.5f);
  EXPECT_FLOAT_EQ(out[1], -2.0f);
}

TEST(SamplingFields, GreedyFollowsTheAdjustedLogits) {
  const float l[3] = {1.0f, 0.9f, 0.0f};
  io::SamplingFields f;
  std::vector<float> scratch;
  const std::vector<int32_t> none;
  f.logit_bias = {{2, 1.5f}};
  EXPECT_EQ(sample_token(l, 3, 0.0, 1.0, f, 1, 0, none, none, scratch), 2);
  f.logit_bias.clear();
  f.frequency_penalty = 0.2;  // token 0 already twice in the output: 1.0 - 0.4 < 0.9
  const std::vector<int32_t> out{0, 0};
  EXPECT_EQ(sample_token(l, 3, 0.0, 1.0, f, 1, 0, none, out, scratch), 1);
}

TEST(SamplingFields, TopKAndMinPRestrictTheSupport) {
  const float l[6] = {0.0f, 2.0f, 1.9f, -3.0f, 1.0f, 0.5f};
  std::vector<float> scratch;
  const std::vector<int32_t> none;
  io::SamplingFields k1;
  k1.top_k = 1;  // any seed, any temperature: the most probable
  io::SamplingFields k2;
  k2.top_k = 2;
  io::SamplingFields mp;
  mp.min_p = 0.5;  // p(x) >= 0.5 p(1) at temperature 1: logits >= 2 - ln 2 = 1.31: tokens 1 and 2
  for (uint64_t seed = 0; seed < 300; ++seed) {
    EXPECT_EQ(sample_token(l, 6, 1.7, 1.0, k1, seed, 3, none, none, scratch), 1);
    const int32_t t2 = sample_token(l, 6, 2.0, 1.0, k2, seed, 3, none, none, scratch);
    EXPECT_TRUE(t2 == 1 || t2 == 2) << t2;
    const int32_t tm = sample_token(l, 6, 1.0, 1.0, mp, seed, 3, none, none, scratch);
    EXPECT_TRUE(tm == 1 || tm == 2) << tm;
  }
}

TEST(SamplingFields, NeutralFieldsAreThePlainSampler) {
  std::vector<float> l(257);
  for (std::size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 3);
  std::vector<float> scratch;
  const std::vector<int32_t> prompt{1, 2, 3}, out{4, 4};
  for (uint64_t seed = 0; seed < 200; ++seed)
    EXPECT_EQ(sample_token(l.data(), 257, 0.8, 0.9, io::SamplingFields{}, seed, 5, prompt, out, scratch),
              sample_token(l.data(), 257, 0.8, 0.9, seed, 5));
}

}  // namespace
}  // namespace moerun::runtime

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
  for (int step = 0; step < 20; ++step)
    EXPECT_EQ(sample_token(l, 5, 1.0, 1.0, 42, step), sample_token(l, 5, 1.0, 1.0, 42, step));
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

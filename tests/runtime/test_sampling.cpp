// Sampling: greedy ties, determinism per (seed, step), top-p restricting the support, and the
// empirical distribution at temperature 1 against the softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/sampling.hpp"

namespace moerun::runtime {
namespace {

TEST(Sampling, GreedyTiesGoToLowerId) {
  const float l[4] = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(argmax(l, 4), 1);
  EXPECT_EQ(sample_token(l, 4, 0.0, 1.0, 7, 0), 1);
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

// The alpha-beta fit: exact points give back their alpha and bandwidth; noise shows in max_error;
// fewer than two sizes, or a non-positive time, is refused. The prediction follows the measured
// points between their sizes and the line outside them.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.hpp"
#include "comm/link_model.hpp"

namespace moerun::comm {
namespace {

TEST(LinkModel, ExactPointsGiveTheirAlphaAndBandwidth) {
  const LinkModel truth{50.0, 1.25, 0.0, {}};  // 50 us, 10 Gbit/s
  std::vector<std::pair<double, double>> pts;
  for (double x = 1024; x <= 64 << 20; x *= 4) pts.emplace_back(x, truth.seconds(x));
  const LinkModel m = fit_link_model(pts);
  EXPECT_NEAR(m.alpha_us, 50.0, 1e-6);
  EXPECT_NEAR(m.bandwidth_gbps, 1.25, 1e-9);
  EXPECT_LT(m.max_error, 1e-9);
  EXPECT_NEAR(m.seconds(1 << 20), 50e-6 + (1 << 20) / 1.25e9, 1e-12);
}

TEST(LinkModel, NoiseShowsInTheLargestError) {
  const LinkModel truth{20.0, 2.0, 0.0, {}};
  std::vector<std::pair<double, double>> pts;
  int i = 0;
  for (double x = 256; x <= 16 << 20; x *= 4, ++i) pts.emplace_back(x, truth.seconds(x) * (i % 2 ? 1.1 : 0.9));
  const LinkModel m = fit_link_model(pts);
  EXPECT_GT(m.max_error, 0.05);
  EXPECT_LT(m.max_error, 0.25);
  EXPECT_NEAR(m.bandwidth_gbps, 2.0, 0.4);
}

TEST(LinkModel, AlphaIsNeverNegative) {
  // Times that grow faster than the bytes (free below a bucket, then the rate): the best line has
  // alpha < 0 (the first point lies under the line through the other two, which meets the origin).
  // Through the origin, with w = 1/t^2: beta = sum(x/t) / sum(x^2/t^2) = 4e9 / 6e18 s/B, 1.5 GB/s.
  const std::vector<std::pair<double, double>> pts{{1e3, 0.5e-6}, {1e5, 100e-6}, {1e6, 1000e-6}};
  const LinkModel m = fit_link_model(pts);
  EXPECT_EQ(m.alpha_us, 0.0);
  EXPECT_NEAR(m.bandwidth_gbps, 1.5, 1e-9);
  EXPECT_NEAR(m.max_error, 1.0 / 3.0, 1e-9);  // the two larger points, 2/3 of their time
}

TEST(LinkModel, BetweenMeasuredSizesThePredictionFollowsThePoints) {
  // A shaped link's knee: free below a 16 KiB bucket, then 1 GB/s. The line misses the knee; the
  // points, hand-interpolated: halfway from 4 KiB (10 us) to 16 KiB (100 us) is 55 us.
  const std::vector<std::pair<double, double>> pts{{16384, 100e-6}, {1024, 10e-6}, {4096, 10e-6}, {1048576, 1100e-6}};
  const LinkModel m = fit_link_model(pts);
  ASSERT_EQ(m.measured.size(), 4u);
  EXPECT_EQ(m.measured.front().first, 1024);  // sorted by bytes
  EXPECT_NEAR(m.seconds(10240), 55e-6, 1e-12);
  EXPECT_NEAR(m.seconds(4096), 10e-6, 1e-12);
  EXPECT_NEAR(m.seconds(1048576), 1100e-6, 1e-12);
  EXPECT_GT(std::abs(m.line_seconds(10240) - 55e-6), 10e-6);  // what the points fix
  // Outside the measured sizes, the line.
  EXPECT_EQ(m.seconds(512), m.line_seconds(512));
  EXPECT_EQ(m.seconds(4 << 20), m.line_seconds(4 << 20));
  // Without points (a model written by hand), the line everywhere.
  const LinkModel bare{10.0, 1.0, 0.0, {}};
  EXPECT_EQ(bare.seconds(10240), bare.line_seconds(10240));
}

TEST(LinkModel, TooFewPointsOrBadTimesAreRefused) {
  EXPECT_THROW(fit_link_model({{1024, 1e-5}}), Error);
  EXPECT_THROW(fit_link_model({{1024, 1e-5}, {1024, 2e-5}}), Error);
  EXPECT_THROW(fit_link_model({{1024, 1e-5}, {4096, 0.0}}), Error);
}

}  // namespace
}  // namespace moerun::comm

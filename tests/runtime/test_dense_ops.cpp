// RMSNorm and RoPE (rotate_half convention) against fp64 references written from the definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/dense_ops.hpp"
#include "tests/test_support.hpp"

namespace moerun::runtime {
namespace {

std::vector<float> randv(std::size_t n, uint32_t seed) { return moerun::testing::random_normal(n, seed); }

TEST(DenseOps, RmsNormMatchesDefinition) {
  const int64_t T = 3, d = 40;
  auto x = randv(T * d, 1), w = randv(d, 2);
  std::vector<float> out(T * d);
  rms_norm(x.data(), T, d, w.data(), 1e-5f, out.data());
  for (int64_t t = 0; t < T; ++t) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i) ms += static_cast<double>(x[t * d + i]) * x[t * d + i];
    const double inv = 1.0 / std::sqrt(ms / d + 1e-5);
    for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(out[t * d + i], x[t * d + i] * inv * w[i], 2e-6 * (1 + std::abs(x[t * d + i] * inv * w[i])));
  }
}

TEST(DenseOps, RopeRotateHalfMatchesDefinition) {
  const int64_t T = 4, heads = 3, hd = 8;
  const double theta = 10000.0;
  auto x = randv(T * heads * hd, 3);
  auto y = x;
  const int32_t pos[T] = {0, 1, 7, 100};
  rope_apply(y.data(), T, heads, hd, pos, theta);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd; ++i) {
        const int64_t j = i % (hd / 2);
        const double ang = pos[t] / std::pow(theta, 2.0 * j / hd);
        const float* v = x.data() + (t * heads + h) * hd;
        // rotate_half(v) = [-v2, v1]
        const double rot = i < hd / 2 ? -v[i + hd / 2] : v[i - hd / 2];
        const double want = v[i] * std::cos(ang) + rot * std::sin(ang);
        EXPECT_NEAR(y[(t * heads + h) * hd + i], want, 2e-5) << "t=" << t << " i=" << i;
      }
}

TEST(DenseOps, RopeAtPositionZeroIsIdentity) {
  auto x = randv(16, 4);
  auto y = x;
  const int32_t pos[1] = {0};
  rope_apply(y.data(), 1, 2, 8, pos, 500000.0);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
}

}  // namespace
}  // namespace moerun::runtime

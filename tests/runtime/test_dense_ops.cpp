// RMSNorm and RoPE (rotate_half convention) against fp64 references written from the definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "base/dtype.hpp"
#include "base/matmul.hpp"
#include "runtime/dense_ops.hpp"
#include "runtime/nonfinite_rows.hpp"
#include "tests/test_support.hpp"

namespace moerun::runtime {
namespace {

std::vector<float> randv(std::size_t n, uint32_t seed) {
  return moerun::testing::random_normal(n, seed);
}

// Rows of a bfloat16 table are widened exactly (bf16 -> f32 is a shift), rows of a float32 one copied.
TEST(DenseOps, EmbeddingRowsOfEitherDtype) {
  const int64_t vocab = 5, d = 3;
  const std::vector<float> values = {0.5f, -1.25f, 3.0f, 1.0f, 2.0f, -0.0625f, 7.0f, 8.5f, -9.0f, 0.0f, 1.5f, 2.5f, -4.0f, 6.0f, 0.75f};
  const std::vector<int32_t> ids = {4, 0, 4, 2};
  for (DType dt : {DType::F32, DType::BF16}) {
    WeightMatrix table;
    table.allocate(dt, vocab, d);
    for (int64_t i = 0; i < vocab * d; ++i) {
      if (dt == DType::F32)
        table.data.as<float>()[i] = values[static_cast<std::size_t>(i)];
      else
        table.data.as<uint16_t>()[i] = f32_to_bf16(values[static_cast<std::size_t>(i)]);  // all exact in bf16
    }
    io::EmbeddingTable t;
    t.dtype = dt;
    t.rows = vocab;
    t.cols = d;
    t.data = table.data.data();
    std::vector<float> out(ids.size() * d);
    embed_tokens(t, ids.data(), static_cast<int64_t>(ids.size()), out.data());
    for (std::size_t t = 0; t < ids.size(); ++t)
      for (int64_t j = 0; j < d; ++j)
        EXPECT_EQ(out[t * d + static_cast<std::size_t>(j)], values[static_cast<std::size_t>(ids[t] * d + j)]) << dtype_name(dt);
  }
}

TEST(DenseOps, RmsNormMatchesDefinition) {
  const int64_t T = 3, d = 40;
  auto x = randv(T * d, 1), w = randv(d, 2);
  std::vector<float> out(T * d);
  rms_norm(x.data(), T, d, w.data(), 1e-5f, out.data());
  for (int64_t t = 0; t < T; ++t) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i) ms += static_cast<double>(x[t * d + i]) * x[t * d + i];
    const double inv = 1.0 / std::sqrt(ms / d + 1e-5);
    for (int64_t i = 0; i < d; ++i)
      EXPECT_NEAR(out[t * d + i], x[t * d + i] * inv * w[i], 2e-6 * (1 + std::abs(x[t * d + i] * inv * w[i])));
  }
}

TEST(DenseOps, RopeRotateHalfMatchesDefinition) {
  const int64_t T = 4, heads = 3, hd = 8;
  const double theta = 10000.0;
  auto x = randv(T * heads * hd, 3);
  auto y = x;
  const int32_t pos[T] = {0, 1, 7, 100};
  rope_apply(y.data(), T, heads, hd, pos, rope_frequencies(theta, hd));
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
  rope_apply(y.data(), 1, 2, 8, pos, rope_frequencies(500000.0, 8));
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
}

// The scaled frequencies against their formulas, evaluated in double (modeling_rope_utils).
TEST(DenseOps, RopeScalingFrequencies) {
  const double theta = 150000.0;
  const int64_t hd = 64;
  model::RopeScaling linear;
  linear.type = model::RopeType::Linear;
  linear.factor = 4.0;
  const RopeFrequencies plain = rope_frequencies(theta, hd), lin = rope_frequencies(theta, hd, linear);
  for (int64_t i = 0; i < hd / 2; ++i) {
    EXPECT_NEAR(plain.inv_freq[i], 1.0 / std::pow(theta, 2.0 * i / hd), 1e-6 * plain.inv_freq[i]);
    EXPECT_NEAR(lin.inv_freq[i], plain.inv_freq[i] / 4.0, 1e-6 * plain.inv_freq[i]);
  }
  // yarn as gpt-oss configures it: factor 32, beta 32 / 1, original context 4096, no truncation.
  model::RopeScaling yarn;
  yarn.type = model::RopeType::Yarn;
  yarn.factor = 32.0;
  yarn.original_max_position = 4096;
  yarn.truncate = false;
  const RopeFrequencies y = rope_frequencies(theta, hd, yarn);
  EXPECT_NEAR(y.attention_scaling, 0.1 * std::log(32.0) + 1.0, 1e-6);
  const double pi = std::acos(-1.0);
  auto corr = [&](double rot) { return hd * std::log(4096.0 / (rot * 2 * pi)) / (2 * std::log(theta)); };
  const double low = std::max(0.0, corr(32.0)), high = std::min(static_cast<double>(hd - 1), corr(1.0));
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0), extrapolate = 1.0 - ramp;
    const double f = 1.0 / std::pow(theta, 2.0 * i / hd);
    const double want = f / 32.0 * (1 - extrapolate) + f * extrapolate;
    EXPECT_NEAR(y.inv_freq[i], want, 2e-6 * want) << i;
  }
  EXPECT_FLOAT_EQ(y.inv_freq[0], plain.inv_freq[0]);  // the fastest dimension extrapolates
  EXPECT_NEAR(y.inv_freq[hd / 2 - 1], plain.inv_freq[hd / 2 - 1] / 32.0, 1e-9);  // the slowest interpolates
  // llama3: wavelengths above the original context / low_freq_factor are divided by the factor.
  model::RopeScaling l3;
  l3.type = model::RopeType::Llama3;
  l3.factor = 8.0;
  l3.original_max_position = 8192;
  const RopeFrequencies ll = rope_frequencies(500000.0, 128, l3), base = rope_frequencies(500000.0, 128);
  for (int64_t i = 0; i < 64; ++i) {
    const double wavelen = 2 * pi / base.inv_freq[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_FLOAT_EQ(ll.inv_freq[i], base.inv_freq[i]);
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(ll.inv_freq[i], base.inv_freq[i] / 8.0f);
    }
  }
}

// The non-finite scan of activations (issue 63): NaN, +-Inf and nothing else, at any position
// (the vectorized loop's body and tail); a flagged row keeps its first mark.
TEST(NonFiniteRows, FindsNanAndInfOnly) {
  std::vector<float> x(37, 1.0f);
  x[5] = 3.4e38f;
  x[6] = -3.4e38f;
  x[7] = 1e-45f;  // subnormal
  EXPECT_TRUE(all_finite(x.data(), 37));
  for (float bad : {NAN, INFINITY, -INFINITY})
    for (int at : {0, 16, 36}) {
      std::vector<float> y = x;
      y[static_cast<std::size_t>(at)] = bad;
      EXPECT_FALSE(all_finite(y.data(), 37)) << bad << " at " << at;
    }
  std::vector<float> rows(3 * 4, 0.0f);
  rows[1 * 4 + 2] = NAN;
  std::vector<int32_t> flag{-1, -1, 7};
  rows[2 * 4] = INFINITY;
  flag_nonfinite_rows(rows.data(), 3, 4, 2, flag.data());
  EXPECT_EQ(flag, (std::vector<int32_t>{-1, 2, 7}));
}

}  // namespace
}  // namespace moerun::runtime

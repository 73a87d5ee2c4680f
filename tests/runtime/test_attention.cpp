// Causal GQA attention against an fp64 reference (full, sliding window, with sinks), and the
// KV-cache properties the engine relies on: prefill of n tokens gives the same outputs as n
// single-token decode steps, and a sliding layer's trimmed cache the same as the whole one.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/attention.hpp"
#include "tests/test_support.hpp"

namespace moerun::runtime {
namespace {

std::vector<float> randv(std::size_t n, uint32_t seed) {
  return moerun::testing::random_normal(n, seed);
}

// 6 heads sharing 2 KV heads (group of 3), head_dim 4, 5 positions.
constexpr int64_t H = 6, KV = 2, hd = 4, n = 5;

// Written from the definition: query i sees keys max(0, i - W + 1) .. i (all earlier ones without a
// window); a sink adds exp(sink) to the softmax's denominator and nothing to the output.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, int64_t window = 0,
                              const float* sinks = nullptr, int64_t len = n) {
  std::vector<double> out(len * H * hd, 0.0);
  for (int64_t i = 0; i < len; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / KV);
      const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
      std::vector<double> s(i + 1, 0.0);
      double z = 0;
      for (int64_t j = first; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < hd; ++c) dot += static_cast<double>(q[(i * H + h) * hd + c]) * k[(j * KV + g) * hd + c];
        s[j] = std::exp(dot / std::sqrt(static_cast<double>(hd)));
        z += s[j];
      }
      if (sinks) z += std::exp(static_cast<double>(sinks[h]));
      for (int64_t j = first; j <= i; ++j)
        for (int64_t c = 0; c < hd; ++c) out[(i * H + h) * hd + c] += s[j] / z * v[(j * KV + g) * hd + c];
    }
  return out;
}

AttentionShape shape(int64_t window = 0, const float* sinks = nullptr) {
  return {H, KV, hd, 1.0f / std::sqrt(static_cast<float>(hd)), window, sinks};
}

TEST(Attention, CausalGqaMatchesFp64) {
  auto q = randv(n * H * hd, 1), k = randv(n * KV * hd, 2), v = randv(n * KV * hd, 3);
  std::vector<float> out(n * H * hd);
  attention_forward(q.data(), k.data(), v.data(), 0, 0, n, shape(), out.data());
  auto want = reference(q, k, v);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5);
}

TEST(Attention, PrefillEqualsDecodeSteps) {
  auto q = randv(n * H * hd, 4), k = randv(n * KV * hd, 5), v = randv(n * KV * hd, 6);
  KvCache prefill, decode;
  prefill.init(1, KV * hd, KV * hd, n);
  decode.init(1, KV * hd, KV * hd, n);
  std::vector<float> a(n * H * hd), b(n * H * hd);
  prefill.append(0, k.data(), v.data(), n);
  attention_forward(q.data(), prefill.row_state(0).k.data(), prefill.row_state(0).v.data(), 0, 0, n, shape(), a.data());
  for (int64_t i = 0; i < n; ++i) {
    decode.append(0, k.data() + i * KV * hd, v.data() + i * KV * hd, 1);
    attention_forward(q.data() + i * H * hd, decode.row_state(0).k.data(), decode.row_state(0).v.data(), 0, i, 1, shape(),
                      b.data() + i * H * hd);
  }
  EXPECT_EQ(decode.length(0), n);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(a[i], b[i]);
}

TEST(Attention, SlidingWindowAndSinksMatchFp64) {
  auto q = randv(n * H * hd, 4), k = randv(n * KV * hd, 5), v = randv(n * KV * hd, 6);
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f, 3.0f, -0.25f};
  for (int64_t window : {0, 1, 2, 3}) {
    for (const float* sk : {static_cast<const float*>(nullptr), sinks.data()}) {
      std::vector<float> out(n * H * hd);
      attention_forward(q.data(), k.data(), v.data(), 0, 0, n, shape(window, sk), out.data());
      const auto want = reference(q, k, v, window, sk);
      for (std::size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], want[i], 1e-5) << "window " << window << " sinks " << (sk != nullptr);
    }
  }
  // A large sink takes most of the mass: the output shrinks towards 0 (it is no value row).
  const std::vector<float> big(H, 30.0f);
  std::vector<float> out(n * H * hd);
  attention_forward(q.data(), k.data(), v.data(), 0, 0, n, shape(0, big.data()), out.data());
  for (float x : out) EXPECT_LT(std::abs(x), 1e-6);
}

// Decode over 40 positions with window 3: the trimmed cache (at most 2W rows between steps) gives
// the outputs of the whole cache, bit for bit, and the fp64 reference's.
TEST(Attention, TrimmedWindowCacheGivesTheSameOutputs) {
  constexpr int64_t len = 40, W = 3;
  auto q = randv(len * H * hd, 7), k = randv(len * KV * hd, 8), v = randv(len * KV * hd, 9);
  KvCache whole, trimmed;
  whole.init(1, KV * hd, KV * hd, len);
  trimmed.init(1, KV * hd, KV * hd, len, {W});
  const auto want = reference(q, k, v, W, nullptr, len);
  for (int64_t i = 0; i < len; ++i) {
    std::vector<float> a(H * hd), b(H * hd);
    whole.append(0, k.data() + i * KV * hd, v.data() + i * KV * hd, 1);
    trimmed.append(0, k.data() + i * KV * hd, v.data() + i * KV * hd, 1);
    attention_forward(q.data() + i * H * hd, whole.row_state(0).k.data(), whole.row_state(0).v.data(), 0, i, 1, shape(W), a.data());
    attention_forward(q.data() + i * H * hd, trimmed.row_state(0).k.data(), trimmed.row_state(0).v.data(), trimmed.row_state(0).start, i, 1,
                      shape(W), b.data());
    for (int64_t c = 0; c < H * hd; ++c) {
      ASSERT_EQ(a[c], b[c]) << "position " << i;
      ASSERT_NEAR(a[c], want[i * H * hd + c], 1e-5);
    }
    trimmed.trim_windows();
    ASSERT_LT(trimmed.rows(0), 2 * W);
    ASSERT_EQ(trimmed.length(0), i + 1);
  }
  EXPECT_GT(trimmed.row_state(0).start, 0);
}

}  // namespace
}  // namespace moerun::runtime

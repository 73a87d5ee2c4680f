// Causal GQA attention against an fp64 reference, and the KV-cache property the engine relies on:
// prefill of n tokens gives the same outputs as n single-token decode steps.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/attention.hpp"
#include "tests/test_support.hpp"

namespace moerun::runtime {
namespace {

std::vector<float> randv(std::size_t n, uint32_t seed) { return moerun::testing::random_normal(n, seed); }

// 6 heads sharing 2 KV heads (group of 3), head_dim 4, 5 positions.
constexpr int64_t H = 6, KV = 2, hd = 4, n = 5;

std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
  std::vector<double> out(n * H * hd, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / KV);
      std::vector<double> s(i + 1);
      double mx = -1e300, z = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < hd; ++c) dot += static_cast<double>(q[(i * H + h) * hd + c]) * k[(j * KV + g) * hd + c];
        s[j] = dot / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[j]);
      }
      for (int64_t j = 0; j <= i; ++j) z += s[j] = std::exp(s[j] - mx);
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t c = 0; c < hd; ++c) out[(i * H + h) * hd + c] += s[j] / z * v[(j * KV + g) * hd + c];
    }
  return out;
}

TEST(Attention, CausalGqaMatchesFp64) {
  auto q = randv(n * H * hd, 1), k = randv(n * KV * hd, 2), v = randv(n * KV * hd, 3);
  std::vector<float> out(n * H * hd);
  attention_forward(q.data(), k.data(), v.data(), 0, n, H, KV, hd, out.data());
  auto want = reference(q, k, v);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], want[i], 1e-5);
}

TEST(Attention, PrefillEqualsDecodeSteps) {
  auto q = randv(n * H * hd, 4), k = randv(n * KV * hd, 5), v = randv(n * KV * hd, 6);
  KvCache prefill, decode;
  prefill.init(1, KV * hd, n);
  decode.init(1, KV * hd, n);
  std::vector<float> a(n * H * hd), b(n * H * hd);
  prefill.append(0, k.data(), v.data(), n);
  attention_forward(q.data(), prefill.k[0].data(), prefill.v[0].data(), 0, n, H, KV, hd, a.data());
  for (int64_t i = 0; i < n; ++i) {
    decode.append(0, k.data() + i * KV * hd, v.data() + i * KV * hd, 1);
    attention_forward(q.data() + i * H * hd, decode.k[0].data(), decode.v[0].data(), i, 1, H, KV, hd, b.data() + i * H * hd);
  }
  EXPECT_EQ(decode.length(0), n);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(a[i], b[i]);
}

}  // namespace
}  // namespace moerun::runtime

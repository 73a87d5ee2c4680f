// Log-softmax, top-K and KL divergence over vocabulary rows.
#include "runtime/log_softmax.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "base/cpu_features.hpp"
#include "base/exp_avx512.hpp"

namespace moerun::runtime {
namespace {

float row_max_scalar(const float* row, int64_t from, int64_t V, float m) {
  for (int64_t v = from; v < V; ++v) m = std::max(m, row[v]);
  return m;
}

// (GCC does not vectorise a float max reduction without -ffast-math: a scalar loop measured 40% of
// a scoring step's log-sum-exp.)
__attribute__((target("avx512f"))) float row_max_avx512(const float* row, int64_t V) {
  __m512 m = _mm512_set1_ps(row[0]);
  int64_t v = 0;
  for (; v + 16 <= V; v += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(row + v));
  return row_max_scalar(row, v, V, _mm512_reduce_max_ps(m));
}

// Σ exp(row[v] - shift) for v < n (n a multiple of 64): four 16-lane float accumulators per block of
// 1024 values (16 terms per lane), each block added in float64.
__attribute__((target("avx512f"))) double sum_exp_avx512(const float* row, int64_t n, float shift) {
  const __m512 s = _mm512_set1_ps(shift);
  double total = 0;
  for (int64_t b = 0; b < n; b += 1024) {
    const int64_t end = std::min(n, b + 1024);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t v = b; v < end; v += 64)
      for (int a = 0; a < 4; ++a) acc[a] = _mm512_add_ps(acc[a], exp_ps(_mm512_sub_ps(_mm512_loadu_ps(row + v + 16 * a), s)));
    const __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, sum);
    for (float x : lanes) total += x;
  }
  return total;
}

}  // namespace

double log_sum_exp(const float* row, int64_t V) {
  const bool avx512 = cpu_features().avx512f;
  const float m = avx512 ? row_max_avx512(row, V) : row_max_scalar(row, 1, V, row[0]);
  const int64_t vec = avx512 ? V / 64 * 64 : 0;
  double sum = vec ? sum_exp_avx512(row, vec, m) : 0.0;
  for (int64_t v = vec; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - m);
  return m + std::log(sum);
}

std::vector<double> log_sum_exp_rows(const float* logits, int64_t rows, int64_t V) {
  std::vector<double> out(static_cast<std::size_t>(rows));
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) out[static_cast<std::size_t>(r)] = log_sum_exp(logits + r * V, V);
  return out;
}

io::TokenLogprob token_logprob(const float* row, int64_t V, double lse, int32_t token, int64_t top_k) {
  io::TokenLogprob t;
  t.token = token;
  t.logprob = static_cast<double>(row[token]) - lse;
  const auto k = static_cast<std::size_t>(std::min(top_k, V));
  if (k == 0) return t;
  // The best k so far, best first; a later (higher) id replaces only a strictly larger logit.
  std::vector<std::pair<float, int32_t>> best;
  best.reserve(k + 1);
  for (int64_t v = 0; v < V; ++v) {
    if (best.size() == k && !(row[v] > best.back().first)) continue;
    auto at = std::find_if(best.begin(), best.end(), [&](const auto& b) { return row[v] > b.first; });
    best.insert(at, {row[v], static_cast<int32_t>(v)});
    if (best.size() > k) best.pop_back();
  }
  for (const auto& [x, id] : best) t.top.emplace_back(id, static_cast<double>(x) - lse);
  return t;
}

void log_softmax_row(const float* row, int64_t V, double lse, float* out) {
  for (int64_t v = 0; v < V; ++v) out[v] = static_cast<float>(static_cast<double>(row[v]) - lse);
}

double kl_divergence(const float* log_p, const float* log_q, int64_t V) {
  double kl = 0;
  for (int64_t v = 0; v < V; ++v) {
    const double lp = log_p[v], lq = log_q[v];
    kl += std::exp(lp) * (lp - lq);
  }
  return kl;
}

}  // namespace moerun::runtime

// Sampling implementation.
#include "runtime/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <immintrin.h>

#include "base/cpu_features.hpp"
#include "base/splitmix64.hpp"

namespace moerun::runtime {

double uniform01(uint64_t seed, int64_t step) {
  const uint64_t h = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

namespace {
// 16 lanes, each keeping its first strict maximum (NaN never wins), then the largest value's
// lowest index: the scalar loop's answer, as one row's time at a 32k vocabulary was 2.5% of a
// 32-sequence decode step. -1 where no element beats -inf.
__attribute__((target("avx512f"))) int64_t argmax_avx512(const float* logits, int64_t V) {
  __m512 best = _mm512_set1_ps(-INFINITY);
  __m512i at = _mm512_set1_epi32(-1), idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  for (int64_t i = 0; i < V; i += 16) {
    const auto m = static_cast<__mmask16>(V - i >= 16 ? 0xFFFF : (1u << (V - i)) - 1);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, logits + i);
    const __mmask16 gt = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
    best = _mm512_mask_blend_ps(gt, best, v);
    at = _mm512_mask_blend_epi32(gt, at, idx);
    idx = _mm512_add_epi32(idx, step);
  }
  alignas(64) float bv[16];
  alignas(64) int32_t bi[16];
  _mm512_store_ps(bv, best);
  _mm512_store_si512(bi, at);
  int64_t out = -1;
  for (int l = 0; l < 16; ++l)
    if (bi[l] >= 0 && (out < 0 || bv[l] > logits[out] || (bv[l] == logits[out] && bi[l] < out))) out = bi[l];
  return out;
}
}  // namespace

int32_t argmax(const float* logits, int64_t V) {
  // A NaN first element is never beaten in the scalar loop; -inf everywhere leaves element 0.
  if (cpu_features().avx512f && V < (int64_t{1} << 31) && !std::isnan(logits[0])) {
    const int64_t i = argmax_avx512(logits, V);
    return static_cast<int32_t>(i < 0 ? 0 : i);
  }
  int64_t best = 0;
  for (int64_t i = 1; i < V; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

namespace {
// Temperature, then the smallest set the filters leave (top_k most probable, those at least min_p x
// the most probable, then the nucleus of top_p of what is left), drawn from with (seed, step).
// top_k 0 and min_p 0 leave every token, so the sum and the draw are the plain sampler's.
int32_t sample_filtered(const float* logits, int64_t V, double temperature, double top_p, int64_t top_k, double min_p, uint64_t seed,
                        int64_t step) {
  double mx = logits[0];
  for (int64_t i = 1; i < V; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  std::vector<double> p(static_cast<std::size_t>(V));
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += p[i] = std::exp((logits[i] - mx) / temperature);
  std::vector<int32_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  std::size_t n = order.size();
  if (top_k > 0) n = std::min<std::size_t>(n, static_cast<std::size_t>(top_k));
  if (min_p > 0)
    while (n > 1 && p[order[n - 1]] < min_p * p[order[0]]) --n;
  if (n < order.size()) {
    sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += p[order[i]];
  }
  // Nucleus: the smallest prefix whose mass reaches top_p.
  double mass = 0;
  std::size_t keep = 0;
  while (keep < n) {
    mass += p[order[keep++]] / sum;
    if (mass >= top_p) break;
  }
  double u = uniform01(seed, step) * mass * sum;
  for (std::size_t i = 0; i < keep; ++i) {
    u -= p[order[i]];
    if (u < 0) return order[i];
  }
  return order[keep - 1];
}
}  // namespace

int32_t sample_token(const float* logits, int64_t V, double temperature, double top_p, uint64_t seed, int64_t step) {
  if (temperature <= 0) return argmax(logits, V);
  return sample_filtered(logits, V, temperature, top_p, 0, 0, seed, step);
}

void adjust_logits(const float* logits, int64_t V, const io::SamplingFields& f, std::span<const int32_t> prompt,
                   std::span<const int32_t> output, float* out) {
  std::copy(logits, logits + V, out);
  for (const auto& [id, bias] : f.logit_bias)
    if (id >= 0 && id < V) out[id] += bias;
  auto in_vocab = [V](int32_t t) { return t >= 0 && t < V; };
  if (f.repetition_penalty != 1) {
    // Each distinct token of the prompt and the output once, as vLLM's and transformers' do.
    std::vector<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(seen.end(), output.begin(), output.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    const auto rp = static_cast<float>(f.repetition_penalty);
    for (int32_t t : seen)
      if (in_vocab(t)) out[t] = out[t] > 0 ? out[t] / rp : out[t] * rp;
  }
  if (f.presence_penalty != 0 || f.frequency_penalty != 0) {
    std::vector<int32_t> counted(output.begin(), output.end());
    std::sort(counted.begin(), counted.end());
    for (std::size_t i = 0; i < counted.size();) {
      std::size_t j = i;
      while (j < counted.size() && counted[j] == counted[i]) ++j;
      if (in_vocab(counted[i]))
        out[counted[i]] -= static_cast<float>(f.frequency_penalty * static_cast<double>(j - i) + f.presence_penalty);
      i = j;
    }
  }
}

int32_t sample_token(const float* logits, int64_t V, double temperature, double top_p, const io::SamplingFields& f, uint64_t seed,
                     int64_t step, std::span<const int32_t> prompt, std::span<const int32_t> output, std::vector<float>& scratch) {
  if (f.neutral()) return sample_token(logits, V, temperature, top_p, seed, step);
  scratch.resize(static_cast<std::size_t>(V));
  adjust_logits(logits, V, f, prompt, output, scratch.data());
  if (temperature <= 0) return argmax(scratch.data(), V);
  return sample_filtered(scratch.data(), V, temperature, top_p, f.top_k, f.min_p, seed, step);
}

}  // namespace moerun::runtime

// Attention kernel.
#include "runtime/attention.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "base/cpu_features.hpp"

namespace moerun::runtime {

namespace {
// The two inner loops for the heads that share a kv head (at most kHeadsTogether), over its rows:
// scores s[t * len + j] = (q_t · k_j) * scale for head t's query q + t * hd, and outputs
// out_t += sum_j p[t * len + j] * v_j (out_t = out + t * vd, zero on entry) in j order. Each row is
// read once for all the heads. Every score and output is computed alike whatever the query count,
// so prefill and decode steps give the same bits.
constexpr int64_t kHeadsTogether = 8;

// AVX-512: a key row in 16-lane pieces against every head's query, the heads' sums in registers,
// one horizontal sum per (head, key); the values in two pieces of 16 lanes at a time for every head,
// in registers over all the keys.
__attribute__((target("avx512f"))) void group_scores_avx512(const float* q, int64_t nh, int64_t hd, const float* kr, int64_t ks,
                                                            int64_t len, float scale, float* s) {
  const int64_t rem = hd % 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << rem) - 1);
  for (int64_t j = 0; j < len; ++j) {
    const float* k = kr + j * ks;
    __m512 acc[kHeadsTogether];
    for (int t = 0; t < kHeadsTogether; ++t) acc[t] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= hd; c += 16) {
      const __m512 kv = _mm512_loadu_ps(k + c);
      for (int t = 0; t < kHeadsTogether; ++t)
        if (t < nh) acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(q + t * hd + c), kv, acc[t]);
    }
    if (rem) {
      const __m512 kv = _mm512_maskz_loadu_ps(tail, k + c);
      for (int t = 0; t < kHeadsTogether; ++t)
        if (t < nh) acc[t] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + t * hd + c), kv, acc[t]);
    }
    for (int t = 0; t < kHeadsTogether; ++t)
      if (t < nh) s[t * len + j] = _mm512_reduce_add_ps(acc[t]) * scale;
  }
}

__attribute__((target("avx512f"))) void group_values_avx512(const float* p, int64_t nh, int64_t len, const float* vr, int64_t vs,
                                                            int64_t vd, float* out) {
  for (int64_t c = 0; c < vd; c += 32) {
    const int64_t w0 = std::min<int64_t>(16, vd - c), w1 = std::clamp<int64_t>(vd - c - 16, 0, 16);
    const __mmask16 m0 = static_cast<__mmask16>(w0 == 16 ? 0xffff : (1u << w0) - 1);
    const __mmask16 m1 = static_cast<__mmask16>(w1 == 16 ? 0xffff : (1u << w1) - 1);
    __m512 a0[kHeadsTogether], a1[kHeadsTogether];
    for (int t = 0; t < kHeadsTogether; ++t) a0[t] = a1[t] = _mm512_setzero_ps();
    for (int64_t j = 0; j < len; ++j) {
      const float* v = vr + j * vs + c;
      const __m512 v0 = _mm512_maskz_loadu_ps(m0, v), v1 = _mm512_maskz_loadu_ps(m1, v + 16);
      for (int t = 0; t < kHeadsTogether; ++t)
        if (t < nh) {
          const __m512 w = _mm512_set1_ps(p[t * len + j]);
          a0[t] = _mm512_fmadd_ps(w, v0, a0[t]);
          a1[t] = _mm512_fmadd_ps(w, v1, a1[t]);
        }
    }
    for (int t = 0; t < kHeadsTogether; ++t)
      if (t < nh) {
        _mm512_mask_storeu_ps(out + t * vd + c, m0, a0[t]);
        if (w1 > 0) _mm512_mask_storeu_ps(out + t * vd + c + 16, m1, a1[t]);
      }
  }
}

// Elsewhere: the same sums in plain loops (other bits than the AVX-512 ones; the same whatever the
// query count on one machine).
void group_scores_portable(const float* q, int64_t nh, int64_t hd, const float* kr, int64_t ks, int64_t len, float scale, float* s) {
  for (int64_t j = 0; j < len; ++j)
    for (int64_t t = 0; t < nh; ++t) {
      float acc = 0;
      for (int64_t c = 0; c < hd; ++c) acc += q[t * hd + c] * kr[j * ks + c];
      s[t * len + j] = acc * scale;
    }
}

void group_values_portable(const float* p, int64_t nh, int64_t len, const float* vr, int64_t vs, int64_t vd, float* out) {
  for (int64_t j = 0; j < len; ++j)
    for (int64_t t = 0; t < nh; ++t)
      for (int64_t c = 0; c < vd; ++c) out[t * vd + c] += p[t * len + j] * vr[j * vs + c];
}
}  // namespace

void attention_forward(const float* q, const float* kc, const float* vc, int64_t kv_start, int64_t pos0, int64_t n, const AttentionShape& a,
                       float* out) {
  const int64_t H = a.heads, hd = a.head_dim, vd = a.v_dim > 0 ? a.v_dim : hd;
  const int64_t group = H / a.kv_heads;
  const int64_t ks = a.k_stride > 0 ? a.k_stride : a.kv_heads * hd, vs = a.v_stride > 0 ? a.v_stride : a.kv_heads * vd;
  // The heads that share a kv head go through its rows together, up to kHeadsTogether at a time:
  // each key and value row is read once for all of them (grouped-query attention, and MLA's
  // absorbed form, where every head shares one), not once per head.
  const bool avx512 = cpu_features().avx512f;
  const int64_t per_task = std::min(group, kHeadsTogether), tasks_per_group = (group + per_task - 1) / per_task;
  const int64_t tasks = n * a.kv_heads * tasks_per_group;
  // In parallel as soon as there is work for more than one thread: at decode (n = 1) the context
  // and the heads make the work, not the query count.
#pragma omp parallel for schedule(dynamic) if (tasks > 1 && n * H * (pos0 + n - kv_start) * hd > 32768)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t i = task / (a.kv_heads * tasks_per_group), g = task / tasks_per_group % a.kv_heads;
    const int64_t h0 = g * group + task % tasks_per_group * per_task, h1 = std::min(h0 + per_task, (g + 1) * group);
    const int64_t pos = pos0 + i;
    const int64_t first = a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : 0;
    const int64_t len = pos - first + 1;
    const float* kr = kc + (first - kv_start) * ks + g * hd;
    const float* vr = vc + (first - kv_start) * vs + g * vd;
    std::vector<float> s(static_cast<std::size_t>((h1 - h0) * len));
    const float* qh = q + i * H * hd + h0 * hd;
    if (avx512)
      group_scores_avx512(qh, h1 - h0, hd, kr, ks, len, a.scale, s.data());
    else
      group_scores_portable(qh, h1 - h0, hd, kr, ks, len, a.scale, s.data());
    for (int64_t h = h0; h < h1; ++h) {
      float* sh = s.data() + (h - h0) * len;
      // A sink joins the max and the sum like one more key, and has no value row.
      float mx = a.sinks ? a.sinks[h] : -INFINITY;
      for (int64_t j = 0; j < len; ++j) mx = std::max(mx, sh[j]);
      float sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        sh[j] = std::exp(sh[j] - mx);
        sum += sh[j];
      }
      if (a.sinks) sum += std::exp(a.sinks[h] - mx);
      for (int64_t j = 0; j < len; ++j) sh[j] /= sum;
      float* o = out + i * H * vd + h * vd;
      std::fill(o, o + vd, 0.0f);
    }
    float* oh = out + i * H * vd + h0 * vd;
    if (avx512)
      group_values_avx512(s.data(), h1 - h0, len, vr, vs, vd, oh);
    else
      group_values_portable(s.data(), h1 - h0, len, vr, vs, vd, oh);
  }
}

}  // namespace moerun::runtime

// DeepSeek Sparse Attention's lightning indexer: its projections into the cache rows and the
// top-k choice per query.
#include "runtime/blocks/dsa_indexer.hpp"

#include "runtime/nonfinite_rows.hpp"

#include "runtime/blocks/mixer_block.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include <immintrin.h>

#include "base/cpu_features.hpp"
#include "base/error.hpp"

namespace moerun::runtime {
namespace {
constexpr float kKeyNormEps = 1e-6f;  // transformers' nn.LayerNorm(head_dim, eps=1e-6)
constexpr int64_t kBlock = 512;  // positions a thread scores at a time

float* fbuf(AlignedBuffer& b, int64_t n) {
  b.resize(static_cast<std::size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
  return b.as<float>();
}

// The index scores of len keys (k_j at k + j * stride, D values) for one query: qt [D][H] its heads'
// queries transposed, w [H] their weights (times 1/sqrt(H)):
//   out[j] = sum_h w_h relu(scale * q_h . k_j).
// AVX-512: 16 heads in the lanes (up to 4 such groups at a time) against 4 keys, each key value
// broadcast (no reduction per head; each query vector loaded once for 4 keys), one horizontal sum
// per key; a key's score is the same whichever keys share its tile. Elsewhere plain loops in head
// order (other bits, the same on a machine).
__attribute__((target("avx512f"))) void index_scores_avx512(const float* qt, int64_t H, int64_t D, const float* k, int64_t stride,
                                                            int64_t len, float scale, const float* w, float* out) {
  constexpr int kKeys = 4, kGroups = 4;
  const __m512 sc = _mm512_set1_ps(scale), zero = _mm512_setzero_ps();
  for (int64_t j0 = 0; j0 < len; j0 += kKeys) {
    const int64_t nk = std::min<int64_t>(kKeys, len - j0);
    __m512 total[kKeys];
    for (int t = 0; t < kKeys; ++t) total[t] = zero;
    for (int64_t g0 = 0; g0 < H; g0 += 16 * kGroups) {
      __mmask16 m[kGroups];
      for (int g = 0; g < kGroups; ++g) {
        const int64_t left = H - g0 - 16 * g;
        m[g] = static_cast<__mmask16>(left >= 16 ? 0xffff : left > 0 ? (1u << left) - 1 : 0);
      }
      __m512 acc[kKeys][kGroups];
      for (int t = 0; t < kKeys; ++t)
        for (int g = 0; g < kGroups; ++g) acc[t][g] = zero;
      for (int64_t e = 0; e < D; ++e) {
        __m512 qv[kGroups];
        for (int g = 0; g < kGroups; ++g) qv[g] = _mm512_maskz_loadu_ps(m[g], qt + e * H + g0 + 16 * g);
        for (int t = 0; t < kKeys; ++t)
          if (t < nk) {
            const __m512 b = _mm512_set1_ps(k[(j0 + t) * stride + e]);
            for (int g = 0; g < kGroups; ++g) acc[t][g] = _mm512_fmadd_ps(b, qv[g], acc[t][g]);
          }
      }
      for (int g = 0; g < kGroups; ++g) {
        const __m512 wv = _mm512_maskz_loadu_ps(m[g], w + g0 + 16 * g);
        for (int t = 0; t < kKeys; ++t) total[t] = _mm512_fmadd_ps(_mm512_max_ps(_mm512_mul_ps(acc[t][g], sc), zero), wv, total[t]);
      }
    }
    for (int t = 0; t < nk; ++t) out[j0 + t] = _mm512_reduce_add_ps(total[t]);
  }
}

void index_scores_portable(const float* qt, int64_t H, int64_t D, const float* k, int64_t stride, int64_t len, float scale, const float* w,
                           float* out) {
  for (int64_t j = 0; j < len; ++j) {
    float total = 0;
    for (int64_t h = 0; h < H; ++h) {
      float dot = 0;
      for (int64_t e = 0; e < D; ++e) dot += qt[e * H + h] * k[j * stride + e];
      total += w[h] * std::max(dot * scale, 0.0f);
    }
    out[j] = total;
  }
}

// LayerNorm over d values: (x - mean) / sqrt(var + eps) * w + b, in double for the moments.
void layer_norm(const float* x, int64_t d, const float* w, const float* b, float eps, float* out) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < d; ++i) mean += x[i];
  mean /= static_cast<double>(d);
  for (int64_t i = 0; i < d; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(d);
  const double inv = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < d; ++i) out[i] = static_cast<float>((x[i] - mean) * inv) * w[i] + b[i];
}
}  // namespace

DsaIndexerWeights DsaIndexerWeights::take(io::LayerTensors& t, Matmul& mm) {
  DsaIndexerWeights w;
  t.take({{"indexer/wq_b", &w.wq_b}, {"indexer/wk", &w.wk}, {"indexer/weights_proj", &w.weights}},
         {{"indexer/k_norm", &w.k_norm}, {"indexer/k_norm_bias", &w.k_norm_bias}});
  w.pack(mm);
  return w;
}

void DsaIndexerWeights::pack(Matmul& mm) {
  pack_for_decode(mm, {&wq_b, &wk, &weights});
}

DsaIndexer::DsaIndexer(const model::ModelConfig& c, Matmul& mm)
    : c_(c), mm_(mm), rope_(rope_frequencies(c.rope_theta, c.mla.qk_rope_head_dim, c.rope)), topk_(c.dsa.index_topk) {}

void DsaIndexer::project(const DsaIndexerWeights& L, const float* xn, const float* q_latent, int64_t n, const int32_t* positions,
                         float* rows) {
  const int64_t H = c_.dsa.index_heads, D = c_.dsa.index_head_dim, stride = c_.kv_k_dim();
  const int64_t col = c_.mla.latent_width();  // the index key's first column in a row
  float* q = fbuf(q_, n * H * D);
  mm_.linear(q_latent, n, L.wq_b, q);
  rope_apply(q, n, H, D, positions, rope_);
  float* wts = fbuf(wts_, n * H);
  mm_.linear(xn, n, L.weights, wts);
  float* k = fbuf(k_, n * D);
  mm_.linear(xn, n, L.wk, k);
  for (int64_t t = 0; t < n; ++t) layer_norm(k + t * D, D, L.k_norm.data(), L.k_norm_bias.data(), kKeyNormEps, k + t * D);
  rope_apply(k, n, 1, D, positions, rope_);
  for (int64_t t = 0; t < n; ++t) std::memcpy(rows + t * stride + col, k + t * D, static_cast<std::size_t>(D) * sizeof(float));
  n_ = n;
  nonfinite_.assign(static_cast<std::size_t>(n), 0);
  for (int64_t t = 0; t < n; ++t)
    nonfinite_[static_cast<std::size_t>(t)] = !all_finite(q + t * H * D, H * D) || !all_finite(wts + t * H, H) || !all_finite(k + t * D, D);
}

void DsaIndexer::select(const KvCache& kv, int64_t l, int64_t first, int64_t count, int64_t pos0, DsaSelection& out) {
  if (first + count > n_) fail(ErrorKind::Internal, "DsaIndexer::select: rows ", first, "+", count, " of ", n_, " projected");
  const int64_t H = c_.dsa.index_heads, D = c_.dsa.index_head_dim, stride = c_.kv_k_dim();
  const int64_t col = c_.mla.latent_width();
  const float* cache = kv.row_state(l).k.data();
  const int64_t start = kv.row_state(l).start;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D)), head_scale = 1.0f / std::sqrt(static_cast<float>(H));
  out.offsets.assign(1, 0);
  out.positions.clear();
  std::vector<float>&score = score_, &qt = qt_, &w = w_heads_;  // kept across calls: one select per sequence, layer and step
  std::vector<int32_t>& order = order_;
  qt.resize(static_cast<std::size_t>(H * D));
  w.resize(static_cast<std::size_t>(H));
  const bool avx512 = cpu_features().avx512f;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = pos0 + i;
    if (attends_all(pos)) {
      for (int64_t s = 0; s <= pos; ++s) out.positions.push_back(static_cast<int32_t>(s));
      out.offsets.push_back(static_cast<int64_t>(out.positions.size()));
      continue;
    }
    const float* q = q_.as<float>() + (first + i) * H * D;
    const float* wq = wts_.as<float>() + (first + i) * H;
    for (int64_t h = 0; h < H; ++h) {
      w[static_cast<std::size_t>(h)] = wq[h] * head_scale;
      for (int64_t e = 0; e < D; ++e) qt[static_cast<std::size_t>(e * H + h)] = q[h * D + e];
    }
    score.resize(static_cast<std::size_t>(pos + 1));
    // Blocks of positions across the threads; each score alike however the blocks fall.
    const int64_t blocks = (pos + kBlock) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t s0 = bi * kBlock, len = std::min(kBlock, pos + 1 - s0);
      const float* k = cache + (s0 - start) * stride + col;
      if (avx512)
        index_scores_avx512(qt.data(), H, D, k, stride, len, scale, w.data(), score.data() + s0);
      else
        index_scores_portable(qt.data(), H, D, k, stride, len, scale, w.data(), score.data() + s0);
    }
    // A key cached by another step that overflowed: a choice made from NaN would look ordinary.
    if (!all_finite(score.data(), pos + 1)) nonfinite_[static_cast<std::size_t>(first + i)] = 1;
    order.resize(static_cast<std::size_t>(pos + 1));
    std::iota(order.begin(), order.end(), 0);
    const auto better = [&](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); };
    std::nth_element(order.begin(), order.begin() + topk_, order.end(), better);
    std::sort(order.begin(), order.begin() + topk_);
    out.positions.insert(out.positions.end(), order.begin(), order.begin() + topk_);
    out.offsets.push_back(static_cast<int64_t>(out.positions.size()));
  }
}

}  // namespace moerun::runtime

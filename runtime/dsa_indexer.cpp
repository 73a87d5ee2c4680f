// DeepSeek Sparse Attention's lightning indexer: its projections into the cache rows and the
// top-k choice per query.
#include "runtime/dsa_indexer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/error.hpp"

namespace moerun::runtime {
namespace {
constexpr float kKeyNormEps = 1e-6f;  // transformers' nn.LayerNorm(head_dim, eps=1e-6)
constexpr int64_t kBlock = 512;       // positions a thread scores at a time

float* fbuf(AlignedBuffer& b, int64_t n) {
  b.resize(static_cast<std::size_t>(std::max<int64_t>(n, 1)) * sizeof(float));
  return b.as<float>();
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

DsaIndexer::DsaIndexer(const io::DenseWeights& w, Matmul& mm)
    : c_(w.config), w_(w), mm_(mm), rope_(rope_frequencies(w.config.rope_theta, w.config.mla.qk_rope_head_dim, w.config.rope)),
      topk_(w.config.dsa.index_topk) {}

void DsaIndexer::project(int64_t l, const float* xn, const float* q_latent, int64_t n, const int32_t* positions, float* rows) {
  const io::DenseLayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
  const int64_t H = c_.dsa.index_heads, D = c_.dsa.index_head_dim, stride = c_.kv_k_dim();
  const int64_t col = c_.mla.kv_lora_rank + c_.mla.qk_rope_head_dim;  // the index key's first column in a row
  float* q = fbuf(q_, n * H * D);
  mm_.linear(q_latent, n, L.idx_wq_b, q);
  rope_apply(q, n, H, D, positions, rope_);
  float* wts = fbuf(wts_, n * H);
  mm_.linear(xn, n, L.idx_weights, wts);
  float* k = fbuf(k_, n * D);
  mm_.linear(xn, n, L.idx_wk, k);
  for (int64_t t = 0; t < n; ++t) layer_norm(k + t * D, D, L.idx_k_norm.data(), L.idx_k_norm_bias.data(), kKeyNormEps, k + t * D);
  rope_apply(k, n, 1, D, positions, rope_);
  for (int64_t t = 0; t < n; ++t) std::memcpy(rows + t * stride + col, k + t * D, static_cast<std::size_t>(D) * sizeof(float));
  n_ = n;
}

void DsaIndexer::select(const KvCache& kv, int64_t l, int64_t first, int64_t count, int64_t pos0, DsaSelection& out) {
  if (first + count > n_) fail(ErrorKind::Internal, "DsaIndexer::select: rows ", first, "+", count, " of ", n_, " projected");
  const int64_t H = c_.dsa.index_heads, D = c_.dsa.index_head_dim, stride = c_.kv_k_dim();
  const int64_t col = c_.mla.kv_lora_rank + c_.mla.qk_rope_head_dim;
  const float* cache = kv.k[static_cast<std::size_t>(l)].data();
  const int64_t start = kv.start[static_cast<std::size_t>(l)];
  const float scale = 1.0f / std::sqrt(static_cast<float>(D)), head_scale = 1.0f / std::sqrt(static_cast<float>(H));
  out.offsets.assign(1, 0);
  out.positions.clear();
  std::vector<float> score;
  std::vector<int32_t> order;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t pos = pos0 + i;
    if (attends_all(pos)) {
      for (int64_t s = 0; s <= pos; ++s) out.positions.push_back(static_cast<int32_t>(s));
      out.offsets.push_back(static_cast<int64_t>(out.positions.size()));
      continue;
    }
    const float* q = q_.as<float>() + (first + i) * H * D;
    const float* w = wts_.as<float>() + (first + i) * H;
    score.assign(static_cast<std::size_t>(pos + 1), 0.0f);
    // Blocks of positions in parallel: each block's heads x positions scores, then per position
    // sum_h w_h relu(score) in head order (the same bits however the blocks fall).
    const int64_t blocks = (pos + kBlock) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t bi = 0; bi < blocks; ++bi) {
      const int64_t s0 = bi * kBlock, len = std::min(kBlock, pos + 1 - s0);
      std::vector<float> hs(static_cast<std::size_t>(H * len));
      head_scores(q, H, D, cache + (s0 - start) * stride + col, stride, len, scale, hs.data());
      for (int64_t j = 0; j < len; ++j) {
        float total = 0;
        for (int64_t h = 0; h < H; ++h) total += w[h] * head_scale * std::max(hs[static_cast<std::size_t>(h * len + j)], 0.0f);
        score[static_cast<std::size_t>(s0 + j)] = total;
      }
    }
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

// DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2, GLM-5), as transformers'
// DeepseekV32Indexer computes it: per query t and cached position s,
//   score(t, s) = sum_h w_h(t) / sqrt(heads) * relu(q_h(t) . k(s) / sqrt(dim)),
// with q = wq_b(MLA's normed q latent) per head, k = LayerNorm(wk(x)) (weight, bias, eps 1e-6), both
// RoPE'd on their first qk_rope_head_dim dims, w = weights_proj(x). A query attends to the
// index_topk positions of highest score among those at or before it (all of them while there are
// no more than index_topk). The keys are the layer state: each position's key is stored in its
// MLA cache row after the latent and the RoPE key, so the prefix cache, --resume and every
// router carry it with the rest of the row.
#pragma once
#include <cstdint>
#include <vector>

#include "base/aligned_buffer.hpp"
#include "base/matmul.hpp"
#include "io/layer_tensors.hpp"
#include "model/model_config.hpp"
#include "runtime/attention.hpp"
#include "runtime/dense_ops.hpp"

namespace moerun::runtime {

// The positions each query of a chunk attends: query i's are positions[offsets[i] .. offsets[i+1]),
// ascending.
struct DsaSelection {
  std::vector<int64_t> offsets;
  std::vector<int32_t> positions;
};

// A layer's indexer: wq_b [heads*dim, q_lora], wk [dim, d], weights [heads, d]; the key's LayerNorm
// weight and bias [dim]. RoPE parts in rotate_half order, as MLA's. Empty on a layer that shares
// another's choice (GLM-5).
struct DsaIndexerWeights {
  WeightMatrix wq_b, wk, weights;
  std::vector<float> k_norm, k_norm_bias;
  // A layer's indexer tensors taken out of `t`, packed for `mm`.
  static DsaIndexerWeights take(io::LayerTensors& t, Matmul& mm);
  void pack(Matmul& mm);
};

class DsaIndexer {
 public:
  DsaIndexer(const model::ModelConfig& c, Matmul& mm);

  // n rows through a layer's weights: xn [n, d] the attention's input, q_latent [n, q_lora] the MLA's normed q
  // latent. Writes each row's key into rows [n, kv_k_dim] at the index key's columns; keeps the
  // queries and head weights for select().
  void project(const DsaIndexerWeights& w, const float* xn, const float* q_latent, int64_t n, const int32_t* positions, float* rows);
  // For rows [first, first + count) of the last project(), at positions pos0.., against `kv`'s
  // layer rows (appended up to the chunk's last position): the positions each attends. Ties go to
  // the earlier position, so the choice is the same however the batch is cut.
  void select(const KvCache& kv, int64_t layer, int64_t first, int64_t count, int64_t pos0, DsaSelection& out);
  // Whether row t of the last project() had a non-finite query, head weight or key, or (after
  // select()) a non-finite score: its choice is not one, and the block makes its output non-finite
  // so that the forward ends the request with an error naming the layer (runtime/nonfinite_rows).
  bool row_nonfinite(int64_t t) const { return nonfinite_[static_cast<std::size_t>(t)] != 0; }
  // Whether a query at `pos` attends every earlier position (there are no more than index_topk).
  bool attends_all(int64_t pos) const { return pos + 1 <= topk_; }

 private:
  const model::ModelConfig& c_;
  Matmul& mm_;
  RopeFrequencies rope_;
  int64_t topk_;
  AlignedBuffer q_, wts_, k_;  // queries [n][heads][dim], head weights [n][heads], keys [n][dim]
  int64_t n_ = 0;
  // select()'s scratch: a query's scores and their order, its queries transposed, its head weights.
  std::vector<float> score_, qt_, w_heads_;
  std::vector<int32_t> order_;
  std::vector<uint8_t> nonfinite_;  // [n] of the last project()
};

}  // namespace moerun::runtime

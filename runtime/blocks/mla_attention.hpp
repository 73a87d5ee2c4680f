// Multi-head latent attention (DeepSeek-V2/V3) on the router rank, as transformers computes it:
//   q = q_b(RMSNorm(q_a(x))) (or q_proj(x)), per head [nope | rope];
//   [c | k_rope] = kv_a(x), c = RMSNorm(c); RoPE on q's rope part and on k_rope (shared by the heads);
//   k_nope, v = kv_b(c) per head; scores (q_nope·k_nope + q_rope·k_rope) * scale; o_proj(heads' outputs).
// The KV cache holds [c | k_rope] per token (kv_lora_rank + qk_rope_head_dim values). Two ways to
// attend, equal up to float rounding:
//   absorbed: kv_b's key part folded into the query (q_lat = W_ukᵀ q_nope) and its value part into
//     the output (W_uv o_lat), so the cached latents are the keys and values themselves: what
//     decode uses, reading the compressed cache only;
//   expanded: k_nope and v computed for the cached positions, then ordinary attention: cheaper for
//     a long prefill chunk (per query the absorbed form does kv_lora-wide dots).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/aligned_buffer.hpp"
#include "base/matmul.hpp"
#include "io/layer_tensors.hpp"
#include "model/model_config.hpp"
#include "runtime/attention.hpp"
#include "runtime/dense_ops.hpp"
#include "runtime/blocks/dsa_indexer.hpp"

namespace moerun::runtime {

// Which form runs: absorbed or expanded always, or by token (auto: expanded for prompt tokens,
// absorbed for generated ones). The forms agree to ~1e-6, not bit for bit, so auto decides by what
// a token is, never by how many share its chunk: a prompt gives the same bits whole, in chunks, or
// after a prefix-cache hit (batch invariance, issue 44).
enum class MlaMode { Auto, Absorbed, Expanded };
MlaMode parse_mla_mode(const std::string& s);  // ConfigError naming the field "mla_attention"

// The softmax scale: 1/sqrt(qk_nope + qk_rope), times mscale(factor, mscale_all_dim)^2 under YaRN
// with mscale_all_dim set (transformers' yarn_apply_mscale).
float mla_softmax_scale(const model::ModelConfig& c);

// One query chunk for attend(): its queries' rows in the micro-batch and the sequence's cache.
struct MlaChunk {
  int64_t first = 0, count = 0;  // rows in the micro-batch's q arrays
  int64_t pos0 = 0;
  const KvCache* kv = nullptr;  // its rows up to pos0 + count - 1 appended already
  bool prompt = false;  // its tokens are prompt tokens (auto: the expanded form)
  const DsaSelection* selection = nullptr;  // DSA: the positions each query attends (null: all earlier ones)
};

// A layer's MLA weights: wq_a [q_lora, d], q_a_norm [q_lora], wq_b [heads*head_dim, q_lora] (or wq
// [heads*head_dim, d] without q_lora_rank), wkv_a [kv_lora + rope, d], kv_a_norm [kv_lora], wo [d,
// heads*v]. Each head's q is nope values then rope values, the RoPE part in rotate_half order
// (convert de-interleaves DeepSeek's). wkv_b [heads*(nope + v), kv_lora] is kept split per head:
// W_uk [nope, kv_lora], its transpose [kv_lora, nope] and W_uv [v, kv_lora].
struct MlaWeights {
  WeightMatrix wq, wq_a, wq_b, wkv_a, wo;
  std::vector<float> q_a_norm, kv_a_norm;
  std::vector<WeightMatrix> uk, uk_t, uv;  // [head]

  // A layer's MLA tensors taken out of `t`, wkv_b split, the matrices packed for `mm`.
  static MlaWeights take(io::LayerTensors& t, const model::ModelConfig& c, Matmul& mm);
  // The split of `wkv_b` (plain, row-major) and the packing, once the other fields are set.
  void prepare(const WeightMatrix& wkv_b, const model::ModelConfig& c, Matmul& mm);
};

class MlaAttention {
 public:
  MlaAttention(const model::ModelConfig& c, Matmul& mm, MlaMode mode);

  // Projections of n rows of normed input xn [n, d] through a layer's weights: the cache rows [n,
  // kv_lora + rope] (normed latent, RoPE'd key) into `rows`, and the queries kept for attend().
  void project(const MlaWeights& w, const float* xn, int64_t n, const int32_t* positions, float* rows);
  // Attention of the projected queries against each chunk's cache rows of `layer`; out [n, heads *
  // v_head_dim].
  void attend(const MlaWeights& w, int64_t layer, const std::vector<MlaChunk>& chunks, int64_t n, float* out);
  // The normed q latent [n, q_lora] of the last project() (DSA's indexer reads it).
  const float* q_latent() const { return qa_.as<float>(); }

 private:
  void attend_absorbed(const MlaWeights& w, int64_t layer, const MlaChunk& ch, float* out);
  void attend_expanded(const MlaWeights& w, int64_t layer, const MlaChunk& ch, float* out);
  // One query per call over the chunk's selected positions' rows, gathered: the first k_width values
  // of k's rows (k_stride apart) and v [rows, v_width] (v null: the keys' rows) into gk and gv,
  // which `shape` describes.
  void attend_selected(const MlaChunk& ch, const float* q, int64_t q_width, const float* k, int64_t k_stride, int64_t k_width,
                       const float* v, int64_t v_width, int64_t kv_start, const AttentionShape& shape, float* out, int64_t out_width);
  const model::ModelConfig& c_;
  Matmul& mm_;
  MlaMode mode_;
  RopeFrequencies rope_;
  float scale_;
  // Scratch: queries of the last project() (q_nope [H][n][nope], q_rope [n][H][rope]), and the
  // forms' working rows.
  AlignedBuffer qa_, q_, q_nope_, q_rope_, kv_a_, kr_, q_cat_, lat_, head_in_, head_out_, kvb_, keys_, vals_, q_full_, gk_, gv_;
  int64_t n_ = 0;  // rows of the last project()
};

}  // namespace moerun::runtime

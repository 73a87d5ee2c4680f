// ModelConfig: the hyper-parameters of a moe-hdf5 model (root attributes of model.h5, DESIGN §3),
// their validation, and the parameter/byte arithmetic that `inspect` and the stats report.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "model/weight_format.hpp"

namespace moerun::model {

// Bounds that validate() enforces before anything is sized from a model's attributes.
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
inline constexpr int64_t kMaxHidden = int64_t{1} << 17;
inline constexpr int64_t kMaxLayers = int64_t{1} << 12;
inline constexpr int64_t kMaxHeads = int64_t{1} << 12;
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
inline constexpr int64_t kMaxExperts = int64_t{1} << 14;
inline constexpr int64_t kMaxTopK = 256;
inline constexpr int64_t kMaxPosition = int64_t{1} << 26;
inline constexpr int64_t kMaxMatrixElements = int64_t{1} << 34;  // 64 GiB in float32
inline constexpr int64_t kMaxExpertTable = int64_t{1} << 20;  // layers x experts

// Layer variants of the 2025 families (docs/FORMATS.md, format version 3). Each default is the
// behaviour of the earlier files, so a file without the attribute reads as before.
enum class QkNorm : int64_t { None = 0, Projection = 1, PerHead = 2 };  // OLMoE: the whole projection; Qwen3: each head
// linear: Gated DeltaNet (Qwen3-Next, Qwen3.5), a recurrent state per sequence instead of a KV cache.
enum class AttentionKind : uint8_t { Full, Sliding, Linear };
// softmax_topk: softmax, then top-k; topk_softmax (gpt-oss): top-k of the logits, softmax over the
// chosen; sigmoid (DeepSeek-V3): sigmoid scores, chosen with the correction bias added.
enum class RouterScoring { SoftmaxTopK, TopKSoftmax, Sigmoid };
// How a group of experts is scored for group-limited routing (DeepSeek): its best expert (V2's
// group_limited_greedy) or the sum of its best two (V3).
enum class GroupScore { Max, Top2Sum };
enum class AttentionType : uint8_t { Mha, Mla };  // multi-head (grouped-query), or DeepSeek's multi-head latent attention
enum class ExpertActivation : int32_t {
  SwiGlu = 0,
  ClampedSwiGlu = 1
};  // values cross the backend C interface  // gpt-oss: clamped gate and up, (up + 1) * gate * sigmoid(alpha * gate)
enum class RopeType { Default, Linear, Dynamic, Yarn, Llama3 };
enum class MlpKind : uint8_t { Moe, Dense };  // Qwen's mlp_only_layers / decoder_sparse_step, DeepSeek's first_k_dense_replace

// RoPE scaling as Hugging Face's rope_scaling / rope_parameters give it (modeling_rope_utils).
struct RopeScaling {
  RopeType type = RopeType::Default;
  double factor = 1.0;
  int64_t original_max_position = 0;  // dynamic, yarn, llama3: the context the model was trained at
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  double attention_factor = 0.0;  // yarn: 0 = derived from factor (and mscale, mscale_all_dim)
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn (DeepSeek)
  bool truncate = true;  // yarn: round the correction range to whole dimensions
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
};
// Multi-head latent attention (DeepSeek-V2/V3): q from x (or through a rank-q_lora_rank path with
// an RMSNorm), keys and values from a shared latent of kv_lora_rank (RMSNorm'd) expanded per head by
// kv_b; each head's q and k are qk_nope_head_dim values without RoPE and qk_rope_head_dim with it,
// the RoPE part of k shared by all heads; values are v_head_dim per head. The KV cache holds the
// latent and the RoPE key: kv_lora_rank + qk_rope_head_dim values a token and layer.
struct MlaShape {
  int64_t q_lora_rank = 0;  // 0: q_proj straight from x
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  // The latent and the RoPE key: the first values of a cache row (DSA's index key follows them).
  int64_t latent_width() const { return kv_lora_rank + qk_rope_head_dim; }
};

// DeepSeek Sparse Attention (format version 11: DeepSeek-V3.2, GLM-5): MLA over the index_topk
// cached positions a lightning indexer picks per query. The indexer has index_heads query heads of
// index_head_dim from the MLA's normed q latent, one key of index_head_dim per position (LayerNorm,
// then RoPE on its first qk_rope_head_dim dims) kept in the layer's cache row after the latent and
// the RoPE key, and per-head weights; a position's score is sum_h w_h relu(q_h . k / sqrt(dim)).
// The newest moe-hdf5 format_version this build reads and writes (11: DSA's indexer).
inline constexpr int64_t kNewestFormatVersion = 11;

// GLM-5 runs the indexer on some layers only; a "shared" layer attends to the positions the last
// full layer before it picked, and has no indexer weights (nor keys: its rows keep the column).
enum class IndexerKind : uint8_t { Full, Shared };
struct DsaShape {
  int64_t index_heads = 0;  // 0: dense MLA
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  std::vector<IndexerKind> layer_indexer;  // [layer]; empty: every layer full
  bool shared(int64_t layer) const {
    return !layer_indexer.empty() && layer_indexer[static_cast<std::size_t>(layer)] == IndexerKind::Shared;
  }
};

// Gated DeltaNet's shape (linear-attention layers): k_heads query/key heads of k_dim, v_heads value
// heads of v_dim (a multiple of k_heads: q/k head h / (v_heads / k_heads) serves value head h), and a
// causal depthwise conv of conv_kernel taps over the q, k, v channels. Per sequence and layer the
// state is the conv's last conv_kernel - 1 inputs and S [v_heads, k_dim, v_dim], in float32.
struct LinearAttentionShape {
  int64_t k_heads = 0, v_heads = 0;
  int64_t k_dim = 0, v_dim = 0;
  int64_t conv_kernel = 4;
  int64_t key_width() const { return k_heads * k_dim; }
  int64_t value_width() const { return v_heads * v_dim; }
  int64_t conv_channels() const { return 2 * key_width() + value_width(); }  // q, k, v
  int64_t recurrent_floats() const { return v_heads * k_dim * v_dim; }
  int64_t conv_state_floats() const { return (conv_kernel - 1) * conv_channels(); }
  int64_t state_bytes() const { return 4 * (recurrent_floats() + conv_state_floats()); }
};

const char* rope_type_name(RopeType t);
const char* attention_kind_name(AttentionKind k);
const char* mlp_kind_name(MlpKind k);

struct ModelConfig {
  std::string architecture = "mixtral";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  int64_t max_position = 0;
  DType dtype = DType::F32;
  WeightFormat expert_format;  // of the experts: {dtype, plain} unless the file says otherwise
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 0;
  // More end tokens (format version 10): generation ends at eos_token_id or any of these
  // (generation_config.json's eos_token_id list past its first, e.g. Qwen3's <|endoftext|>).
  std::vector<int64_t> extra_eos_token_ids;
  bool is_end_token(int64_t t) const {
    return t == eos_token_id || std::find(extra_eos_token_ids.begin(), extra_eos_token_ids.end(), t) != extra_eos_token_ids.end();
  }
  // Architecture variants (docs/FORMATS.md). The defaults are Mixtral's; qwen2_moe and olmoe
  // checkpoints converted from Hugging Face set them as their configs say.
  bool norm_topk_prob = true;  // renormalise the top-k weights to sum 1 (false: raw softmax probabilities)
  int64_t shared_expert_intermediate_size = 0;  // > 0: a dense shared expert with a sigmoid gate on every token (qwen2_moe)
  bool attention_bias = false;  // biases on the q, k and v projections (qwen2_moe)
  QkNorm qk_norm = QkNorm::None;  // RMSNorm of q and k before RoPE: over the projection (olmoe) or each head (qwen3_moe)
  bool attention_out_bias = false;  // a bias on the o projection too (gpt_oss)
  bool attention_sinks = false;  // a learned logit per head joins each softmax and is dropped after it (gpt_oss)
  int64_t sliding_window = 0;  // W of the sliding layers: a query attends to the last W positions, itself included
  std::vector<AttentionKind> layer_attention;  // [num_layers]; empty: every layer full
  // A dense layer has a SwiGLU MLP of its own width on the router ranks instead of experts and a
  // gate. The expert tables (shards, placement, cache, traces) number the MoE layers only, in order.
  std::vector<MlpKind> layer_mlp;  // [num_layers]; empty: every layer MoE
  int64_t dense_intermediate_size = 0;  // the dense layers' MLP width
  RopeScaling rope;
  bool router_bias = false;  // a bias on the gate linear (gpt_oss)
  RouterScoring router_scoring = RouterScoring::SoftmaxTopK;
  // Group-limited routing (DeepSeek): experts in router_groups equal groups, the router_topk_groups
  // best groups kept (by router_group_score), the top-k chosen inside them. 1 group: plain top-k.
  int64_t router_groups = 1, router_topk_groups = 1;
  GroupScore router_group_score = GroupScore::Max;
  bool router_correction_bias = false;  // a per-expert bias added to the scores for the choice only (V3's e_score_correction_bias)
  double routed_scaling_factor = 1.0;  // the routed experts' weights times this (after any renormalisation)
  bool shared_expert_gated = true;  // the shared expert's output through a sigmoid gate (Qwen2-MoE), or added as is (DeepSeek)
  AttentionType attention_type = AttentionType::Mha;
  MlaShape mla;  // attention_type mla: its shape (head_dim = nope + rope, num_kv_heads = num_heads)
  DsaShape dsa;  // MLA with DeepSeek Sparse Attention's indexer (index_heads > 0)
  int64_t rotary_dim = 0;  // RoPE on each head's first rotary_dim dims, the rest unrotated (glm4_moe); 0: all
  // Format version 8 (Qwen3-Next): linear-attention layers (layer_types "linear") of this shape; the
  // full layers' output gated by sigmoid(x Wq_gate) per element; RMSNorm weights stored as w and
  // applied as w + norm_weight_offset (Qwen3-Next's (1 + w) norms: attn, ffn, final, q and k).
  LinearAttentionShape linear;
  bool attention_output_gate = false;
  double norm_weight_offset = 0.0;
  bool expert_bias = false;  // biases on the expert projections w1, w3, w2 (gpt_oss)
  ExpertActivation expert_activation = ExpertActivation::SwiGlu;
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;  // ClampedSwiGlu
  // Integrity (format version 2): model.h5's record of its expert shards, one identity per shard
  // file in name order (shard_identity). Empty for a version-1 file, which binds no shards.
  int64_t format_version = kNewestFormatVersion;  // of the file read; a config built in memory is the newest
  std::vector<uint64_t> shard_ids;

  // Throws ErrorKind::BadInput naming `where` and the attribute that is out of range.
  void validate(const std::string& where) const;

  int64_t rope_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }  // the rotated dims of a head (not MLA's)
  AttentionKind attention_kind(int64_t layer) const {
    return layer_attention.empty() ? AttentionKind::Full : layer_attention[static_cast<std::size_t>(layer)];
  }
  // The window of a layer's attention, 0 for full attention.
  int64_t window_of(int64_t layer) const { return attention_kind(layer) == AttentionKind::Sliding ? sliding_window : 0; }
  bool is_linear_layer(int64_t layer) const { return attention_kind(layer) == AttentionKind::Linear; }
  int64_t num_linear_layers() const;
  bool is_moe_layer(int64_t layer) const { return layer_mlp.empty() || layer_mlp[static_cast<std::size_t>(layer)] == MlpKind::Moe; }
  int64_t num_moe_layers() const;
  int64_t num_dense_layers() const { return num_layers - num_moe_layers(); }
  // The decoder layer's index among the MoE layers (its row in the expert tables), -1 for a dense one.
  int64_t moe_index(int64_t layer) const;
  // Elements of one expert's biases (b1, b3 [ff], b2 [d]), 0 without them.
  int64_t expert_bias_params() const { return expert_bias ? 2 * intermediate_size + hidden_size : 0; }

  // Parameter counts (elements, not bytes).
  int64_t params_per_expert() const { return 3 * hidden_size * intermediate_size + expert_bias_params(); }
  int64_t expert_params() const { return num_moe_layers() * num_experts * params_per_expert(); }
  int64_t num_expert_slots() const { return num_moe_layers() * num_experts; }  // experts in the model
  int64_t dense_params() const;  // the rows of model/model_schema, summed there
  int64_t total_params() const { return dense_params() + expert_params(); }
  // Parameters applied to one token: all dense ones plus top_k experts per layer.
  int64_t active_params_per_token() const { return dense_params() + num_moe_layers() * top_k * params_per_expert(); }
  // Bytes of one expert as stored (its raw form: quantized values and scales for q8/q4).
  int64_t bytes_per_expert() const;
  // What the KV cache holds per token and layer: K and V rows of kv_heads * head_dim floats, or for
  // MLA one row of the latent and the RoPE key (kv_lora_rank + qk_rope_head_dim) and no V.
  // The cache row per position: GQA's keys; MLA's latent and RoPE key (and DSA's index key).
  int64_t kv_k_dim() const {
    return attention_type == AttentionType::Mla ? mla.latent_width() + dsa.index_head_dim : num_kv_heads * head_dim;
  }
  bool is_dsa() const { return attention_type == AttentionType::Mla && dsa.index_heads > 0; }
  int64_t kv_v_dim() const { return attention_type == AttentionType::Mla ? 0 : num_kv_heads * head_dim; }
  // Width of the attention output that o_proj takes: heads * head_dim, or heads * v_head_dim (MLA).
  int64_t attention_out_dim() const { return num_heads * (attention_type == AttentionType::Mla ? mla.v_head_dim : head_dim); }
  // KV cache bytes per token of context (fp32, every layer with a KV cache).
  int64_t kv_bytes_per_token() const { return (num_layers - num_linear_layers()) * (kv_k_dim() + kv_v_dim()) * 4; }
  // KV cache bytes of one sequence of `context` tokens: a sliding layer holds at most its window, a
  // linear-attention layer its recurrent state whatever the context.
  int64_t kv_bytes(int64_t context) const;
};

DType parse_dtype(const std::string& name, const std::string& where);
// "full,sliding,full" <-> layer kinds; BadInput naming `where` and the entry that is neither.
std::vector<AttentionKind> parse_layer_attention(const std::string& text, const std::string& where);
std::string layer_attention_text(const std::vector<AttentionKind>& kinds);
// "moe,dense,moe" <-> layer MLP kinds (attribute layer_mlp).
std::vector<MlpKind> parse_layer_mlp(const std::string& text, const std::string& where);
std::vector<IndexerKind> parse_layer_indexer(const std::string& text, const std::string& where);
std::string layer_indexer_text(const std::vector<IndexerKind>& kinds);
std::string layer_mlp_text(const std::vector<MlpKind>& kinds);
RopeType parse_rope_type(const std::string& name, const std::string& where);

// The format_version a writer gives a file of this config: 3, or the version that first has what it
// uses (4 q8/q4 experts, 5 mxfp4/fp8-block, 6 MLA and DeepSeek's routing), so every file stays
// readable by the oldest build that can compute it.
int64_t required_format_version(const ModelConfig& c);
// Whether the config uses anything of format version 6 (MLA, group-limited or sigmoid routing, a
// correction bias, a routed scaling factor, an ungated shared expert).
bool uses_version6(const ModelConfig& c);

// The architectures this build runs, for messages ("mixtral, qwen2_moe, ..."), from the family
// table (model/model_family.hpp).
std::string supported_architectures();

}  // namespace moerun::model

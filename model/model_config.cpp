// ModelConfig validation and size arithmetic.
#include "model/model_config.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "base/error.hpp"
#include "base/native_quant.hpp"
#include "model/model_attributes.hpp"
#include "model/model_family.hpp"

namespace moerun::model {

DType parse_dtype(const std::string& name, const std::string& where) {
  if (name == "float32") return DType::F32;
  if (name == "bfloat16") return DType::BF16;
  fail(ErrorKind::BadInput, where, ": dtype is \"", name, "\", expected \"float32\" or \"bfloat16\"");
}

namespace {
bool is_supported_architecture(const std::string& a) {
  return find_model_family(a) != nullptr;
}
}  // namespace

bool uses_version6(const ModelConfig& c) {
  return c.attention_type == AttentionType::Mla || c.router_groups > 1 || c.router_scoring == RouterScoring::Sigmoid ||
         c.router_correction_bias || c.routed_scaling_factor != 1.0 || (c.shared_expert_intermediate_size > 0 && !c.shared_expert_gated);
}

int64_t required_format_version(const ModelConfig& c) {
  int64_t version = 3;  // the oldest any writer still writes
  for (const ModelAttribute& a : model_attributes())
    if (a.write(c)) version = std::max(version, a.since);
  return std::max(format_version_for(c.expert_format.scheme), version);
}

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::Default: return "default";
    case RopeType::Linear: return "linear";
    case RopeType::Dynamic: return "dynamic";
    case RopeType::Yarn: return "yarn";
    case RopeType::Llama3: return "llama3";
  }
  return "?";
}

RopeType parse_rope_type(const std::string& name, const std::string& where) {
  for (RopeType t : {RopeType::Default, RopeType::Linear, RopeType::Dynamic, RopeType::Yarn, RopeType::Llama3})
    if (name == rope_type_name(t)) return t;
  fail(ErrorKind::BadInput, where, ": rope type \"", name, "\" is not supported; supported: default, linear, yarn, llama3");
}

const char* attention_kind_name(AttentionKind k) {
  return k == AttentionKind::Sliding ? "sliding" : k == AttentionKind::Linear ? "linear" : "full";
}
const char* mlp_kind_name(MlpKind k) {
  return k == MlpKind::Dense ? "dense" : "moe";
}

namespace {
// A comma-separated list of per-layer kinds, each one of the names `name_of` gives `kinds`.
template <class Kind>
std::vector<Kind> parse_layer_kinds(const std::string& text, const std::string& where, const char* attribute,
                                    std::initializer_list<Kind> kinds, const char* (*name_of)(Kind)) {
  std::vector<Kind> out;
  const std::vector<Kind> all(kinds);
  std::string names = name_of(all[0]);  // "a or b", "a, b or c"
  for (std::size_t i = 1; i < all.size(); ++i) names += std::string(i + 1 == all.size() ? " or " : ", ") + name_of(all[i]);
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    const auto it = std::find_if(kinds.begin(), kinds.end(), [&](Kind k) { return item == name_of(k); });
    if (it == kinds.end()) fail(ErrorKind::BadInput, where, ": ", attribute, " entry ", out.size(), " is \"", item, "\", expected ", names);
    out.push_back(*it);
    start = comma + 1;
  }
  return out;
}

template <class Kind>
std::string layer_kinds_text(const std::vector<Kind>& kinds, const char* (*name_of)(Kind)) {
  std::string s;
  for (std::size_t i = 0; i < kinds.size(); ++i) s += std::string(i ? "," : "") + name_of(kinds[i]);
  return s;
}
}  // namespace

std::vector<AttentionKind> parse_layer_attention(const std::string& text, const std::string& where) {
  return parse_layer_kinds(text, where, "layer_types", {AttentionKind::Full, AttentionKind::Sliding, AttentionKind::Linear},
                           attention_kind_name);
}
std::string layer_attention_text(const std::vector<AttentionKind>& kinds) {
  return layer_kinds_text(kinds, attention_kind_name);
}
std::vector<MlpKind> parse_layer_mlp(const std::string& text, const std::string& where) {
  return parse_layer_kinds(text, where, "layer_mlp", {MlpKind::Moe, MlpKind::Dense}, mlp_kind_name);
}
std::string layer_mlp_text(const std::vector<MlpKind>& kinds) {
  return layer_kinds_text(kinds, mlp_kind_name);
}
namespace {
const char* indexer_kind_name(IndexerKind k) {
  return k == IndexerKind::Shared ? "shared" : "full";
}
}  // namespace
std::vector<IndexerKind> parse_layer_indexer(const std::string& text, const std::string& where) {
  return parse_layer_kinds(text, where, "index_layer_types", {IndexerKind::Full, IndexerKind::Shared}, indexer_kind_name);
}
std::string layer_indexer_text(const std::vector<IndexerKind>& kinds) {
  return layer_kinds_text(kinds, indexer_kind_name);
}

int64_t ModelConfig::num_linear_layers() const {
  return std::count(layer_attention.begin(), layer_attention.end(), AttentionKind::Linear);
}

int64_t ModelConfig::num_moe_layers() const {
  return layer_mlp.empty() ? num_layers : std::count(layer_mlp.begin(), layer_mlp.end(), MlpKind::Moe);
}

int64_t ModelConfig::moe_index(int64_t layer) const {
  if (!is_moe_layer(layer)) return -1;
  return layer_mlp.empty() ? layer : std::count(layer_mlp.begin(), layer_mlp.begin() + layer, MlpKind::Moe);
}

namespace {
// The layer variants' own checks (validate() has checked the shapes they size).
// MLA's dimensions, and what it does not combine with here (kv heads, q/k norms, biases, sinks,
// windows: no MLA model has them).
// DSA's indexer: its sizes, and a first layer that runs it (a shared layer reuses an earlier one's choice).
void validate_dsa(const ModelConfig& c, const std::string& where) {
  const DsaShape& s = c.dsa;
  if (s.index_heads == 0 && s.index_head_dim == 0 && s.index_topk == 0 && s.layer_indexer.empty()) return;
  if (c.attention_type != AttentionType::Mla || c.mla.q_lora_rank <= 0)
    fail(ErrorKind::BadInput, where,
         ": index_n_heads needs attention_type mla with q_lora_rank > 0 (the indexer's queries come from the q latent)");
  auto in_range = [&](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", v, ", expected in [", lo, ", ", hi, "]");
  };
  in_range("index_n_heads", s.index_heads, 1, 1024);
  in_range("index_head_dim", s.index_head_dim, c.mla.qk_rope_head_dim, kMaxHeadDim);
  in_range("index_topk", s.index_topk, 1, int64_t{1} << 30);
  if (s.index_heads * s.index_head_dim * std::max(c.mla.q_lora_rank, c.hidden_size) > kMaxMatrixElements)
    fail(ErrorKind::BadInput, where, ": the indexer's wq_b [index_n_heads*index_head_dim, q_lora_rank] is more than ", kMaxMatrixElements,
         " elements");
  if (!s.layer_indexer.empty() && static_cast<int64_t>(s.layer_indexer.size()) != c.num_layers)
    fail(ErrorKind::BadInput, where, ": attribute index_layer_types has ", s.layer_indexer.size(),
         " entries, expected num_layers = ", c.num_layers);
  if (s.shared(0))
    fail(ErrorKind::BadInput, where, ": attribute index_layer_types starts with shared: layer 0 has no earlier choice to reuse");
}

void validate_mla(const ModelConfig& c, const std::string& where) {
  if (c.attention_type != AttentionType::Mla) return;
  const MlaShape& m = c.mla;
  auto in_range = [&](const char* name, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", v, ", expected in [", lo, ", ", hi, "]");
  };
  in_range("q_lora_rank", m.q_lora_rank, 0, kMaxHidden);
  in_range("kv_lora_rank", m.kv_lora_rank, 1, kMaxHidden);
  in_range("qk_nope_head_dim", m.qk_nope_head_dim, 1, kMaxHeadDim);
  in_range("qk_rope_head_dim", m.qk_rope_head_dim, 2, kMaxHeadDim);
  in_range("v_head_dim", m.v_head_dim, 1, kMaxHeadDim);
  if (m.qk_rope_head_dim % 2 != 0)
    fail(ErrorKind::BadInput, where, ": attribute qk_rope_head_dim is ", m.qk_rope_head_dim, ", expected even (RoPE rotates pairs)");
  if (c.head_dim != m.qk_nope_head_dim + m.qk_rope_head_dim)
    fail(ErrorKind::BadInput, where, ": attribute head_dim is ", c.head_dim,
         ", expected qk_nope_head_dim + qk_rope_head_dim = ", m.qk_nope_head_dim + m.qk_rope_head_dim, " (MLA)");
  if (c.num_kv_heads != c.num_heads)
    fail(ErrorKind::BadInput, where, ": attribute num_kv_heads is ", c.num_kv_heads, ", expected num_heads (", c.num_heads, ") with MLA");
  if (c.qk_norm != QkNorm::None || c.attention_bias || c.attention_out_bias || c.attention_sinks || c.sliding_window > 0)
    fail(ErrorKind::BadInput, where, ": attention_type mla takes no q/k norm, attention biases, sinks or sliding window");
  const int64_t H = c.num_heads;
  for (auto [what, a, b] :
       {std::tuple{"wq/wq_b [num_heads*head_dim, ...]", H * c.head_dim, std::max(m.q_lora_rank, c.hidden_size)},
        std::tuple{"wkv_b [num_heads*(qk_nope_head_dim+v_head_dim), kv_lora_rank]", H * (m.qk_nope_head_dim + m.v_head_dim),
                   m.kv_lora_rank},
        std::tuple{"wo [hidden_size, num_heads*v_head_dim]", c.hidden_size, H * m.v_head_dim},
        std::tuple{"wkv_a [kv_lora_rank+qk_rope_head_dim, hidden_size]", m.kv_lora_rank + m.qk_rope_head_dim, c.hidden_size}})
    if (a * b > kMaxMatrixElements) fail(ErrorKind::BadInput, where, ": ", what, " is ", a, " x ", b, ", more than ", kMaxMatrixElements);
}

// Group-limited routing: whole groups, enough experts in the kept groups for top_k, a scale that
// is a number.
void validate_group_routing(const ModelConfig& c, const std::string& where) {
  if (c.router_groups < 1 || c.router_groups > c.num_experts || c.num_experts % c.router_groups != 0)
    fail(ErrorKind::BadInput, where, ": attribute router_groups is ", c.router_groups, ", expected a divisor of num_experts (",
         c.num_experts, ")");
  if (c.router_topk_groups < 1 || c.router_topk_groups > c.router_groups)
    fail(ErrorKind::BadInput, where, ": attribute router_topk_groups is ", c.router_topk_groups,
         ", expected in [1, router_groups = ", c.router_groups, "]");
  const int64_t per_group = c.num_experts / c.router_groups;
  if (c.top_k > c.router_topk_groups * per_group)
    fail(ErrorKind::BadInput, where, ": top_k (", c.top_k, ") exceeds the experts of the kept groups (", c.router_topk_groups, " x ",
         per_group, ")");
  if (c.router_groups > 1 && c.router_group_score == GroupScore::Top2Sum && per_group < 2)
    fail(ErrorKind::BadInput, where, ": router_group_score top2_sum needs at least 2 experts a group, there are ", per_group);
  if (!(c.routed_scaling_factor > 0) || !std::isfinite(c.routed_scaling_factor))
    fail(ErrorKind::BadInput, where, ": attribute routed_scaling_factor is ", c.routed_scaling_factor, ", expected a finite number > 0");
}

void validate_variants(const ModelConfig& c, const std::string& where) {
  if (!c.layer_attention.empty() && static_cast<int64_t>(c.layer_attention.size()) != c.num_layers)
    fail(ErrorKind::BadInput, where, ": attribute layer_types has ", c.layer_attention.size(), " entries for ", c.num_layers, " layers");
  if (!c.layer_mlp.empty() && static_cast<int64_t>(c.layer_mlp.size()) != c.num_layers)
    fail(ErrorKind::BadInput, where, ": attribute layer_mlp has ", c.layer_mlp.size(), " entries for ", c.num_layers, " layers");
  if (c.num_moe_layers() == 0) fail(ErrorKind::BadInput, where, ": attribute layer_mlp has no moe layer");
  if (c.num_dense_layers() > 0 && c.dense_intermediate_size <= 0)
    fail(ErrorKind::BadInput, where, ": attribute dense_intermediate_size is ", c.dense_intermediate_size,
         ", expected > 0 with dense layers");
  if (c.dense_intermediate_size < 0 || c.dense_intermediate_size > kMaxIntermediate ||
      c.dense_intermediate_size * c.hidden_size > kMaxMatrixElements)
    fail(ErrorKind::BadInput, where, ": attribute dense_intermediate_size is ", c.dense_intermediate_size, ", expected in [0, ",
         std::min(kMaxIntermediate, kMaxMatrixElements / c.hidden_size), "]");
  const bool any_sliding =
      std::any_of(c.layer_attention.begin(), c.layer_attention.end(), [](AttentionKind k) { return k == AttentionKind::Sliding; });
  if (c.sliding_window < 0 || c.sliding_window > kMaxPosition)
    fail(ErrorKind::BadInput, where, ": attribute sliding_window is ", c.sliding_window, ", expected in [0, ", kMaxPosition, "]");
  if (any_sliding && c.sliding_window == 0) fail(ErrorKind::BadInput, where, ": layer_types has sliding layers but sliding_window is 0");
  if (c.num_linear_layers() > 0) {
    const LinearAttentionShape& s = c.linear;
    auto in = [&](const char* name, int64_t v, int64_t hi) {
      if (v < 1 || v > hi)
        fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", v, ", expected in [1, ", hi, "] with linear layers");
    };
    in("linear_k_heads", s.k_heads, kMaxHeads);
    in("linear_v_heads", s.v_heads, kMaxHeads);
    in("linear_k_dim", s.k_dim, kMaxHeadDim);
    in("linear_v_dim", s.v_dim, kMaxHeadDim);
    in("linear_conv_kernel", s.conv_kernel, 16);
    if (s.v_heads % s.k_heads != 0)
      fail(ErrorKind::BadInput, where, ": attribute linear_v_heads (", s.v_heads, ") is not a multiple of linear_k_heads (", s.k_heads,
           ")");
    if (c.attention_type == AttentionType::Mla) fail(ErrorKind::BadInput, where, ": linear layers do not combine with attention_type mla");
  }
  if (c.norm_weight_offset != 0 && c.norm_weight_offset != 1)
    fail(ErrorKind::BadInput, where, ": attribute norm_weight_offset is ", c.norm_weight_offset, ", expected 0 or 1");
  const RopeScaling& r = c.rope;
  auto finite_positive = [&](const char* name, double v) {
    if (!(v > 0) || !std::isfinite(v)) fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", v, ", expected a finite number > 0");
  };
  if (r.type == RopeType::Dynamic)
    fail(ErrorKind::BadInput, where, ": attribute rope_type is dynamic: not supported (its frequencies follow the batch's length)");
  if (r.type != RopeType::Default) {
    finite_positive("rope_factor", r.factor);
    if (r.type == RopeType::Linear && r.factor < 1)
      fail(ErrorKind::BadInput, where, ": attribute rope_factor is ", r.factor, ", expected >= 1");
  }
  if (r.type == RopeType::Yarn || r.type == RopeType::Llama3 || r.type == RopeType::Dynamic) {
    if (r.original_max_position <= 0 || r.original_max_position > kMaxPosition)
      fail(ErrorKind::BadInput, where, ": attribute rope_original_max_position is ", r.original_max_position, ", expected in (0, ",
           kMaxPosition, "]");
  }
  if (r.type == RopeType::Yarn) {
    finite_positive("rope_beta_fast", r.beta_fast);
    finite_positive("rope_beta_slow", r.beta_slow);
    if (!(r.attention_factor >= 0) || !std::isfinite(r.attention_factor))
      fail(ErrorKind::BadInput, where, ": attribute rope_attention_factor is ", r.attention_factor, ", expected >= 0 (0: derived)");
  }
  if (r.type == RopeType::Llama3) {
    finite_positive("rope_low_freq_factor", r.low_freq_factor);
    finite_positive("rope_high_freq_factor", r.high_freq_factor);
    if (r.high_freq_factor <= r.low_freq_factor)
      fail(ErrorKind::BadInput, where, ": attribute rope_high_freq_factor (", r.high_freq_factor, ") must exceed rope_low_freq_factor (",
           r.low_freq_factor, ")");
  }
  if (c.expert_activation == ExpertActivation::ClampedSwiGlu) {
    finite_positive("swiglu_alpha", c.swiglu_alpha);
    finite_positive("swiglu_limit", c.swiglu_limit);
  }
  validate_mla(c, where);
  validate_dsa(c, where);
  validate_group_routing(c, where);
  if (c.rotary_dim != 0 &&
      (c.rotary_dim < 2 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0 || c.attention_type == AttentionType::Mla))
    fail(ErrorKind::BadInput, where, ": attribute rotary_dim is ", c.rotary_dim, ", expected 0 (all of head_dim ", c.head_dim,
         ") or even in [2, head_dim], and not with MLA");
}
}  // namespace

void ModelConfig::validate(const std::string& where) const {
  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", v, ", expected > 0");
  };
  if (!is_supported_architecture(architecture))
    fail(ErrorKind::BadInput, where, ": attribute architecture is \"", architecture, "\"; supported: ", supported_architectures());
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_layers", num_layers);
  positive("num_heads", num_heads);
  positive("num_kv_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("intermediate_size", intermediate_size);
  positive("num_experts", num_experts);
  positive("top_k", top_k);
  positive("max_position", max_position);
  // Upper bounds, checked before anything is sized from these values: a corrupt or hostile file
  // must not overflow the arithmetic below or allocate before it is rejected. Each bound is far
  // above any published MoE model (vocab 256k, d 16k, 256 experts, 128 layers).
  auto at_most = [&](const char* name, int64_t v, int64_t limit) {
    if (v > limit) fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", v, ", expected <= ", limit);
  };
  at_most("vocab_size", vocab_size, kMaxVocab);
  at_most("hidden_size", hidden_size, kMaxHidden);
  at_most("num_layers", num_layers, kMaxLayers);
  at_most("num_heads", num_heads, kMaxHeads);
  at_most("num_kv_heads", num_kv_heads, kMaxHeads);
  at_most("head_dim", head_dim, kMaxHeadDim);
  at_most("intermediate_size", intermediate_size, kMaxIntermediate);
  at_most("num_experts", num_experts, kMaxExperts);
  at_most("max_position", max_position, kMaxPosition);
  at_most("top_k", top_k, kMaxTopK);
  // Products: every weight matrix, the expert count of the model, the parameters in total. With
  // the bounds above none of these overflows int64 (at most 2^17 * 2^24 = 2^41 for one matrix).
  auto product_at_most = [&](const char* what, int64_t a, int64_t b, int64_t limit) {
    if (a * b > limit) fail(ErrorKind::BadInput, where, ": ", what, " is ", a, " x ", b, ", more than ", limit);
  };
  product_at_most("embed_tokens/lm_head [vocab_size, hidden_size]", vocab_size, hidden_size, kMaxMatrixElements);
  product_at_most("wq [num_heads*head_dim, hidden_size]", num_heads * head_dim, hidden_size, kMaxMatrixElements);
  product_at_most("w1 [intermediate_size, hidden_size]", intermediate_size, hidden_size, kMaxMatrixElements);
  product_at_most("the expert table num_layers x num_experts", num_layers, num_experts, kMaxExpertTable);  // bounds the MoE layers' too
  if (shared_expert_intermediate_size < 0)
    fail(ErrorKind::BadInput, where, ": attribute shared_expert_intermediate_size is ", shared_expert_intermediate_size, ", expected >= 0");
  at_most("shared_expert_intermediate_size", shared_expert_intermediate_size, kMaxIntermediate);
  product_at_most("shared_expert/w1 [shared_expert_intermediate_size, hidden_size]", shared_expert_intermediate_size, hidden_size,
                  kMaxMatrixElements);
  if (num_heads % num_kv_heads != 0)
    fail(ErrorKind::BadInput, where, ": attribute num_kv_heads (", num_kv_heads, ") does not divide num_heads (", num_heads, ")");
  if (head_dim % 2 != 0) fail(ErrorKind::BadInput, where, ": attribute head_dim is ", head_dim, ", expected even (RoPE rotates pairs)");
  if (top_k > num_experts) fail(ErrorKind::BadInput, where, ": attribute top_k (", top_k, ") exceeds num_experts (", num_experts, ")");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta))
    fail(ErrorKind::BadInput, where, ": attribute rope_theta is ", rope_theta, ", expected a finite number > 0");
  if (!(rms_norm_eps > 0) || rms_norm_eps > 1)
    fail(ErrorKind::BadInput, where, ": attribute rms_norm_eps is ", rms_norm_eps, ", expected in (0, 1]");
  if (bos_token_id < 0 || bos_token_id >= vocab_size)
    fail(ErrorKind::BadInput, where, ": attribute bos_token_id is ", bos_token_id, ", expected in [0, ", vocab_size, ")");
  if (eos_token_id < 0 || eos_token_id >= vocab_size)
    fail(ErrorKind::BadInput, where, ": attribute eos_token_id is ", eos_token_id, ", expected in [0, ", vocab_size, ")");
  validate_variants(*this, where);
  // Every quantized scheme works in groups of 32 along a matrix's input dimension (fp8-block's
  // 128 x 128 blocks may be partial at the edges, its kernels still take 32 k at a time).
  const WeightScheme s = expert_format.scheme;
  if (s != WeightScheme::Plain && (hidden_size % kQuantGroup != 0 || intermediate_size % kQuantGroup != 0))
    fail(ErrorKind::BadInput, where, ": expert_format ", expert_format.name(), " needs hidden_size (", hidden_size,
         ") and intermediate_size (", intermediate_size, ") to be multiples of ", kQuantGroup, " (its group size)");
  if (s != WeightScheme::Plain && format_version < format_version_for(s))
    fail(ErrorKind::BadInput, where, ": expert_format ", expert_format.name(), " needs format_version ", format_version_for(s),
         ", the file says ", format_version);
  if (uses_version6(*this) && format_version < 6)
    fail(ErrorKind::BadInput, where, ": MLA or DeepSeek routing attributes need format_version 6, the file says ", format_version);
  if (rotary_dim > 0 && format_version < 7)
    fail(ErrorKind::BadInput, where, ": attribute rotary_dim needs format_version 7, the file says ", format_version);
  if ((num_linear_layers() > 0 || attention_output_gate || norm_weight_offset != 0) && format_version < 8)
    fail(ErrorKind::BadInput, where, ": linear layers, attention_output_gate and norm_weight_offset need format_version 8, the file says ",
         format_version);
  if (dsa.index_heads > 0 && format_version < 11)
    fail(ErrorKind::BadInput, where, ": DSA's indexer attributes (index_n_heads, ...) need format_version 11, the file says ",
         format_version);
  if (!extra_eos_token_ids.empty() && format_version < 10)
    fail(ErrorKind::BadInput, where, ": attribute extra_eos_token_ids needs format_version 10, the file says ", format_version);
  for (int64_t t : extra_eos_token_ids)
    if (t < 0 || t >= vocab_size) fail(ErrorKind::BadInput, where, ": end token ", t, " is outside [0, ", vocab_size, ")");
}

int64_t ModelConfig::bytes_per_expert() const {
  const WeightScheme s = expert_format.scheme;
  const int64_t bias = expert_bias_params() * static_cast<int64_t>(dtype_size(dtype));
  if (s == WeightScheme::Plain) return params_per_expert() * static_cast<int64_t>(dtype_size(dtype));
  // Values and scales of w1, w3 [ff, d] and w2 [d, ff] (docs/FORMATS.md).
  const int64_t ff = intermediate_size, d = hidden_size;
  auto matrix = [&](int64_t rows, int64_t cols) {
    if (s == WeightScheme::Mxfp4) return rows * (cols / 2 + cols / kMxfp4Block);
    if (s == WeightScheme::Fp8Block) return rows * cols + 4 * fp8_scale_rows(rows) * fp8_scale_cols(cols);
    const int64_t levels = s == WeightScheme::Int4 ? cols / kQuantGroup : 0;
    return rows * (quant_row_bytes(s, cols) + 2 * quant_row_scales(s, cols) + levels);
  };
  return 2 * matrix(ff, d) + matrix(d, ff) + bias;
}

int64_t ModelConfig::kv_bytes(int64_t context) const {
  const int64_t per_position = (kv_k_dim() + kv_v_dim()) * 4;
  int64_t total = 0;
  // A sliding layer holds at most 2W positions between steps (KvCache::trim_windows).
  for (int64_t l = 0; l < num_layers; ++l)
    total += is_linear_layer(l) ? linear.state_bytes() : per_position * (window_of(l) > 0 ? std::min(context, 2 * window_of(l)) : context);
  return total;
}

}  // namespace moerun::model

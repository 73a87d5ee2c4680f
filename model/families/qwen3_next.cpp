// Qwen3-Next (transformers' modeling_qwen3_next): three of every four layers Gated DeltaNet (linear
// attention with a recurrent state), the fourth full attention with a sigmoid output gate (q_proj
// doubled), per-head q/k norms and RoPE on a quarter of each head; every RMSNorm but DeltaNet's gated
// one scales by (1 + w); Qwen2-MoE's experts with a gated shared expert. Its fused DeltaNet
// projections are de-interleaved into Qwen3.5's separate form, which model.h5 keeps; the "mtp."
// module is not converted. The hybrid helpers Qwen3.5-MoE shares (families.hpp) live here too.
#include "model/families/families.hpp"
#include "model/model_schema.hpp"

#include <cstring>

namespace moerun::model::families {
namespace {

// layer_types, else every full_attention_interval-th layer full (Qwen3NextConfig's default).
void read_layer_kinds(const HfConfig& h, ModelConfig& c) {
  if (read_layer_type_list(h, c, AttentionKind::Linear, "linear_attention")) return;
  c.layer_attention.clear();
  const int64_t every = h.integer_or("full_attention_interval", 4);
  if (every < 1) fail(ErrorKind::BadInput, h.where, ": field full_attention_interval is ", every, ", expected >= 1");
  for (int64_t l = 0; l < c.num_layers; ++l)
    c.layer_attention.push_back((l + 1) % every == 0 ? AttentionKind::Full : AttentionKind::Linear);
}

}  // namespace

void read_hybrid(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  if (h.flag_or("attention_bias", false))
    fail(ErrorKind::BadInput, h.where, ": field attention_bias is true; not supported for ", c.architecture);
  c.shared_expert_intermediate_size = h.integer("shared_expert_intermediate_size");
  c.qk_norm = QkNorm::PerHead;
  c.attention_output_gate = true;
  c.norm_weight_offset = 1.0;
  c.rotary_dim = read_rotary_dim(h, c.head_dim, 0.25);
  c.linear = {.k_heads = h.integer("linear_num_key_heads"),
              .v_heads = h.integer("linear_num_value_heads"),
              .k_dim = h.integer("linear_key_head_dim"),
              .v_dim = h.integer("linear_value_head_dim"),
              .conv_kernel = h.integer_or("linear_conv_kernel_dim", 4)};
  if (c.linear.k_heads < 1 || c.linear.v_heads % c.linear.k_heads != 0)
    fail(ErrorKind::BadInput, h.where, ": field linear_num_value_heads (", c.linear.v_heads,
         ") is not a multiple of linear_num_key_heads (", c.linear.k_heads, ")");
  read_layer_kinds(h, c);
  note(c.architecture + ": the multi-token prediction module (mtp.*) is not converted (it serves speculative decoding only)");
}

void synth_hybrid(ModelConfig& m) {
  m.norm_topk_prob = true;
  m.qk_norm = QkNorm::PerHead;
  m.attention_output_gate = true;
  m.norm_weight_offset = 1.0;
  m.shared_expert_intermediate_size = m.intermediate_size;
  const int64_t quarter = m.head_dim / 8 * 2;
  m.rotary_dim = quarter >= 2 && quarter < m.head_dim ? quarter : 0;
  m.linear = {
      .k_heads = std::max<int64_t>(1, m.num_heads / 2), .v_heads = m.num_heads, .k_dim = m.head_dim, .v_dim = m.head_dim, .conv_kernel = 4};
  m.layer_attention.clear();
  for (int64_t l = 0; l < m.num_layers; ++l)
    m.layer_attention.push_back((l + 1) % 4 == 0 || l == m.num_layers - 1 ? AttentionKind::Full : AttentionKind::Linear);
}

namespace {
// The rows of a fused projection: per key head h a group of `group` rows, of which the dataset takes
// rows [from, from + take) of each group.
std::vector<int64_t> grouped_rows(int64_t groups, int64_t group, int64_t from, int64_t take) {
  std::vector<int64_t> rows;
  for (int64_t h = 0; h < groups; ++h)
    for (int64_t i = 0; i < take; ++i) rows.push_back(h * group + from + i);
  return rows;
}

}  // namespace

// in_proj_qkvz is [k_heads, (q k_dim, k k_dim, v r*v_dim, z r*v_dim)] and in_proj_ba [k_heads, (b r,
// a r)] with r = v_heads / k_heads (fix_query_key_value_ordering); q_proj [heads, (query, gate)].
bool hybrid_dense_source(const DenseDataset& ds, const ModelConfig& c, DenseSource& out, bool fused) {
  const LinearAttentionShape& s = c.linear;
  const int64_t d = c.hidden_size, hk = s.k_heads, r = s.v_heads / std::max<int64_t>(1, s.k_heads), kd = s.k_dim, vd = r * s.v_dim;
  const std::string p = "model.layers." + std::to_string(ds.layer) + ".";
  // Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b and in_proj_a are the rows' own tensors.
  if (fused && (ds.name == "linear/w_qkv" || ds.name == "linear/w_z")) {
    const int64_t group = 2 * kd + 2 * vd;
    out = {p + "linear_attn.in_proj_qkvz.weight", {hk * group, d}, {}};
    if (ds.name == "linear/w_z") {
      out.rows = grouped_rows(hk, group, 2 * kd + vd, vd);
    } else {
      for (auto [from, take] : {std::pair{int64_t{0}, kd}, {kd, kd}, {2 * kd, vd}}) {
        const std::vector<int64_t> part = grouped_rows(hk, group, from, take);
        out.rows.insert(out.rows.end(), part.begin(), part.end());
      }
    }
    return true;
  }
  if (fused && (ds.name == "linear/w_b" || ds.name == "linear/w_a")) {
    out = {p + "linear_attn.in_proj_ba.weight", {hk * 2 * r, d}, grouped_rows(hk, 2 * r, ds.name == "linear/w_b" ? 0 : r, r)};
    return true;
  }
  if (ds.name == "wq" || ds.name == "wq_gate") {
    const int64_t hd = c.head_dim;
    out = {p + "self_attn.q_proj.weight", {2 * c.num_heads * hd, d}, grouped_rows(c.num_heads, 2 * hd, ds.name == "wq" ? 0 : hd, hd)};
    return true;
  }
  if (ds.name == "linear/conv") {  // stored [channels, 1, kernel]
    out = {p + ds.checkpoint, {s.conv_channels(), 1, s.conv_kernel}, {}};
    return true;
  }
  return false;  // the row's own tensor (dt_bias, A_log, the norm, out_proj)
}

namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  if (read_qwen_moe(h, c)) fail(ErrorKind::BadInput, h.where, ": use_sliding_window is true; not supported for qwen3_next");
  read_hybrid(h, c, note);
}

}  // namespace

const ModelFamily kQwen3Next{
    .name = "qwen3_next",
    .rope_theta = 10000.0,
    .from_hf = from_hf,
    .synth = synth_hybrid,
    .unconverted_prefixes = {"mtp."},
    .dense_source = [](const DenseDataset& ds, const ModelConfig& c, DenseSource& out) { return hybrid_dense_source(ds, c, out, true); }};

}  // namespace moerun::model::families

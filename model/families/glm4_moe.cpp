// GLM-4.5 / 4.6 (transformers' modeling_glm4_moe): GQA with biases on q, k and v (not o), per-head
// q/k RMSNorm when use_qk_norm, RoPE on the first partial_rotary_factor of each head (rotate_half),
// DeepSeek-V3's router (sigmoid scores, a correction bias, groups by their best two, renormalised
// and scaled), n_shared_experts ungated shared experts, first_k_dense_replace dense layers. The
// multi-token prediction layers past num_hidden_layers are not converted.
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  c.num_experts = h.integer("n_routed_experts");
  c.intermediate_size = h.integer("moe_intermediate_size");
  c.shared_expert_intermediate_size = h.integer_or("n_shared_experts", 0) * c.intermediate_size;
  c.shared_expert_gated = false;
  c.attention_bias = h.flag_or("attention_bias", false);  // q, k, v only: o_proj has none
  if (h.flag_or("use_qk_norm", false)) c.qk_norm = QkNorm::PerHead;
  c.rotary_dim = read_rotary_dim(h, c.head_dim, 0.5);
  read_v3_router(h, c);
  c.routed_scaling_factor = h.number_or("routed_scaling_factor", 1.0);
  read_first_dense_layers(h, c);
  note_unconverted_layers(h, c, note, "num_nextn_predict_layers");
}

// GLM-4.5-Air's shape at synth's sizes: half of each head rotated, per-head q/k norms, q/k/v
// biases, experts in up to 4 groups (2 kept), one shared expert, a dense first layer.
void synth(ModelConfig& m) {
  m.attention_bias = true;
  m.qk_norm = QkNorm::PerHead;
  m.rotary_dim = synth_half_rotary_dim(m.head_dim);
  synth_deepseek_moe(true, m);  // V3's router, one shared expert, a dense first layer
}

}  // namespace

const ModelFamily kGlm4Moe{.name = "glm4_moe",
                           .from_hf = from_hf,
                           .synth = synth,
                           .tensor_names = deepseek_tensor_names,
                           .unconverted_layers = [](const HfConfig& h) { return h.integer_or("num_nextn_predict_layers", 0); }};

}  // namespace moerun::model::families

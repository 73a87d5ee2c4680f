// GLM-4.5 / 4.6 (transformers' modeling_glm4_moe): GQA with biases on q, k and v (not o), per-head
// q/k RMSNorm when use_qk_norm, RoPE on the first partial_rotary_factor of each head (rotate_half),
// DeepSeek-V3's router (sigmoid scores, a correction bias, groups by their best two, renormalised
// and scaled), n_shared_experts ungated shared experts, first_k_dense_replace dense layers. The
// multi-token prediction layers past num_hidden_layers are not converted.
#include <algorithm>

#include "io/families/families.hpp"

namespace moerun::io::families {
namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  c.num_experts = h.integer("n_routed_experts");
  c.intermediate_size = h.integer("moe_intermediate_size");
  c.shared_expert_intermediate_size = h.integer_or("n_shared_experts", 0) * c.intermediate_size;
  c.shared_expert_gated = false;
  c.attention_bias = h.flag_or("attention_bias", false);  // q, k, v only: o_proj has none
  if (h.flag_or("use_qk_norm", false)) c.qk_norm = QkNorm::PerHead;
  const double factor = h.number_or("partial_rotary_factor", 0.5);
  if (!(factor > 0 && factor <= 1)) fail(ErrorKind::BadInput, h.where, ": field partial_rotary_factor is ", factor, ", expected in (0, 1]");
  const auto rotary = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);  // int(), as transformers' rope init
  c.rotary_dim = rotary == c.head_dim ? 0 : rotary;
  c.router_scoring = RouterScoring::Sigmoid;
  c.router_correction_bias = true;
  c.router_group_score = GroupScore::Top2Sum;
  c.router_groups = h.integer_or("n_group", 1);
  c.router_topk_groups = h.integer_or("topk_group", c.router_groups);
  c.norm_topk_prob = h.flag_or("norm_topk_prob", true);
  c.routed_scaling_factor = h.number_or("routed_scaling_factor", 1.0);
  const int64_t k = h.integer_or("first_k_dense_replace", 0);
  if (k < 0 || k >= c.num_layers)
    fail(ErrorKind::BadInput, h.where, ": field first_k_dense_replace is ", k, ", expected in [0, num_hidden_layers = ", c.num_layers, ")");
  if (k > 0) {
    c.layer_mlp.assign(static_cast<std::size_t>(c.num_layers), MlpKind::Moe);
    for (int64_t l = 0; l < k; ++l) c.layer_mlp[static_cast<std::size_t>(l)] = MlpKind::Dense;
    c.dense_intermediate_size = h.integer("intermediate_size");
  }
  if (const int64_t mtp = h.integer_or("num_nextn_predict_layers", 0); mtp > 0)
    note("num_nextn_predict_layers " + std::to_string(mtp) + ": the multi-token prediction layer(s) model.layers." +
         std::to_string(c.num_layers) + ".* are not converted (they serve speculative decoding only)");
}

// GLM-4.5-Air's shape at synth's sizes: half of each head rotated, per-head q/k norms, q/k/v
// biases, experts in up to 4 groups (2 kept), one shared expert, a dense first layer.
void synth(ModelConfig& m) {
  m.attention_bias = true;
  m.qk_norm = QkNorm::PerHead;
  const int64_t half = m.head_dim / 4 * 2;  // half of a head, even
  m.rotary_dim = half >= 2 && half < m.head_dim ? half : 0;
  m.router_scoring = RouterScoring::Sigmoid;
  m.router_correction_bias = true;
  m.router_group_score = GroupScore::Top2Sum;
  const int64_t E = m.num_experts;
  m.router_groups = E % 4 == 0 && E >= 8 ? 4 : E % 2 == 0 && E >= 4 ? 2 : 1;
  m.router_topk_groups = std::max<int64_t>(1, m.router_groups / 2);
  if (m.top_k > m.router_topk_groups * (E / m.router_groups)) m.router_topk_groups = m.router_groups;
  m.norm_topk_prob = true;
  m.routed_scaling_factor = 2.5;
  m.shared_expert_intermediate_size = m.intermediate_size;
  m.shared_expert_gated = false;
  if (m.num_layers > 1) {
    m.layer_mlp.assign(static_cast<std::size_t>(m.num_layers), MlpKind::Moe);
    m.layer_mlp[0] = MlpKind::Dense;
    m.dense_intermediate_size = 4 * m.intermediate_size;
  }
}

}  // namespace

const ModelFamily kGlm4Moe{.name = "glm4_moe",
                           .from_hf = from_hf,
                           .synth = synth,
                           .tensor_names = deepseek_tensor_names,
                           .unconverted_layers = [](const HfConfig& h) { return h.integer_or("num_nextn_predict_layers", 0); }};

}  // namespace moerun::io::families

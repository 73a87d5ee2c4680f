// DeepSeek-V2 (transformers' modeling_deepseek_v2): MLA, softmax routing, greedy or group-limited;
// and the readers DeepSeek-V3 and GLM-4.5 share.
#include <algorithm>

#include "model/families/families.hpp"

namespace moerun::model::families {

// DeepSeek-V2/V3 (transformers' modeling_deepseek_v2/v3): MLA, the routed experts of
// moe_intermediate_size in n_group groups, n_shared_experts shared ones without a gate, dense
// first_k_dense_replace layers of intermediate_size. V3: sigmoid scores with e_score_correction_bias,
// groups by their best two, renormalised by norm_topk_prob; V2: softmax scores, greedy or
// group_limited_greedy (groups by their best), never renormalised (transformers' DeepseekV2).
// Both scale by routed_scaling_factor. RoPE is interleaved (V2 always, V3 with rope_interleave):
// convert de-interleaves the rows (deinterleave_rope), so the runtime's rotate_half applies.
void read_deepseek(const HfConfig& h, ModelConfig& c, const NoteSink& note, bool v3) {
  c.attention_type = AttentionType::Mla;
  c.mla.q_lora_rank = h.integer_or("q_lora_rank", 0);
  c.mla.kv_lora_rank = h.integer("kv_lora_rank");
  c.mla.qk_nope_head_dim = h.integer("qk_nope_head_dim");
  c.mla.qk_rope_head_dim = h.integer("qk_rope_head_dim");
  c.mla.v_head_dim = h.integer("v_head_dim");
  c.head_dim = c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim;
  c.num_kv_heads = c.num_heads;  // MLA: every head has its own keys and values
  c.num_experts = h.integer("n_routed_experts");
  c.intermediate_size = h.integer("moe_intermediate_size");
  c.shared_expert_intermediate_size = h.integer_or("n_shared_experts", 0) * c.intermediate_size;
  c.shared_expert_gated = false;
  c.routed_scaling_factor = h.number_or("routed_scaling_factor", 1.0);
  if (h.flag_or("attention_bias", false))
    fail(ErrorKind::BadInput, h.where, ": field attention_bias is true; not supported for ", h.j["model_type"].get<std::string>());
  if (h.flag_or("mlp_bias", false)) fail(ErrorKind::BadInput, h.where, ": field mlp_bias is true; not supported");
  if (h.integer_or("moe_layer_freq", 1) != 1) fail(ErrorKind::BadInput, h.where, ": field moe_layer_freq is not 1; not supported");
  const std::string scoring =
      h.has("scoring_func") && h.j["scoring_func"].is_string() ? h.j["scoring_func"].get<std::string>() : (v3 ? "sigmoid" : "softmax");
  if (scoring != (v3 ? "sigmoid" : "softmax"))
    fail(ErrorKind::BadInput, h.where, ": field scoring_func is \"", scoring, "\"; ",
         v3 ? "deepseek_v3 scores with sigmoid" : "deepseek_v2 scores with softmax");
  if (v3) {
    read_v3_router(h, c);
  } else {
    const std::string method = h.has("topk_method") && h.j["topk_method"].is_string() ? h.j["topk_method"].get<std::string>() : "greedy";
    if (method != "greedy" && method != "group_limited_greedy")
      fail(ErrorKind::BadInput, h.where, ": field topk_method is \"", method, "\", expected greedy or group_limited_greedy");
    if (method == "group_limited_greedy") {
      c.router_groups = h.integer_or("n_group", 1);
      c.router_topk_groups = h.integer_or("topk_group", c.router_groups);
    }
    c.router_group_score = GroupScore::Max;
    if (h.flag_or("norm_topk_prob", false))
      fail(ErrorKind::BadInput, h.where,
           ": field norm_topk_prob is true: transformers' DeepseekV2 does not renormalise (DeepSeek's own code would); not supported");
    c.norm_topk_prob = false;
  }
  read_first_dense_layers(h, c);
  note_unconverted_layers(h, c, note, "num_nextn_predict_layers");
}

void read_v3_router(const HfConfig& h, ModelConfig& c) {
  c.router_scoring = RouterScoring::Sigmoid;
  c.router_correction_bias = true;
  c.router_group_score = GroupScore::Top2Sum;
  c.router_groups = h.integer_or("n_group", 1);
  c.router_topk_groups = h.integer_or("topk_group", c.router_groups);
  c.norm_topk_prob = h.flag_or("norm_topk_prob", true);
}

void read_first_dense_layers(const HfConfig& h, ModelConfig& c) {
  const int64_t k = h.integer_or("first_k_dense_replace", 0);
  if (k < 0 || k >= c.num_layers)
    fail(ErrorKind::BadInput, h.where, ": field first_k_dense_replace is ", k, ", expected in [0, num_hidden_layers = ", c.num_layers, ")");
  if (k == 0) return;
  c.layer_mlp.assign(static_cast<std::size_t>(c.num_layers), MlpKind::Moe);
  for (int64_t l = 0; l < k; ++l) c.layer_mlp[static_cast<std::size_t>(l)] = MlpKind::Dense;
  c.dense_intermediate_size = h.integer("intermediate_size");
}

void note_unconverted_layers(const HfConfig& h, const ModelConfig& c, const NoteSink& note, const char* field) {
  if (const int64_t n = h.integer_or(field, 0); n > 0)
    note(std::string(field) + " " + std::to_string(n) + ": the multi-token prediction layer(s) model.layers." +
         std::to_string(c.num_layers) + ".* are not converted (they serve speculative decoding only)");
}

// DeepSeek's variants at synth's sizes: MLA with the q/k head dim given (a third of it RoPE, the
// rest nope, values as wide as nope, a latent of twice nope; V3 with a q_lora of half the hidden
// size, V2 without), experts in up to 4 groups (V3: sigmoid scores, a correction bias, groups by
// their best two, renormalised and scaled by 2.5; V2: softmax, groups by their best, raw weights),
// shared experts without a gate (1 x intermediate for V3, 2 x for V2), a dense first layer.
void synth_deepseek(bool v3, ModelConfig& m) {
  const int64_t rope = std::max<int64_t>(2, m.head_dim / 3 / 2 * 2);
  m.attention_type = AttentionType::Mla;
  m.num_kv_heads = m.num_heads;
  m.mla.qk_rope_head_dim = rope;
  m.mla.qk_nope_head_dim = m.head_dim - rope;
  m.mla.v_head_dim = m.mla.qk_nope_head_dim;
  m.mla.kv_lora_rank = 2 * m.mla.qk_nope_head_dim;
  m.mla.q_lora_rank = v3 ? m.hidden_size / 2 : 0;
  synth_deepseek_moe(v3, m);
}

void synth_deepseek_moe(bool v3, ModelConfig& m) {
  const int64_t E = m.num_experts;
  m.router_groups = E % 4 == 0 && E >= 8 ? 4 : E % 2 == 0 && E >= 4 ? 2 : 1;
  m.router_topk_groups = std::max<int64_t>(1, m.router_groups / 2);
  if (m.top_k > m.router_topk_groups * (E / m.router_groups)) m.router_topk_groups = m.router_groups;
  m.router_group_score = v3 ? GroupScore::Top2Sum : GroupScore::Max;
  m.router_scoring = v3 ? RouterScoring::Sigmoid : RouterScoring::SoftmaxTopK;
  m.router_correction_bias = v3;
  m.routed_scaling_factor = v3 ? 2.5 : 1.0;
  m.norm_topk_prob = v3;
  m.shared_expert_intermediate_size = (v3 ? 1 : 2) * m.intermediate_size;
  m.shared_expert_gated = false;
  if (m.num_layers > 1) {
    m.layer_mlp.assign(static_cast<std::size_t>(m.num_layers), MlpKind::Moe);
    m.layer_mlp[0] = MlpKind::Dense;
    m.dense_intermediate_size = 4 * m.intermediate_size;
  }
}

namespace {
void v2_from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  read_deepseek(h, c, note, false);
}
void v2_synth(ModelConfig& m) {
  synth_deepseek(false, m);
}
}  // namespace

void deepseek_tensor_names(NameMap& n) {
  n.dense["shared_expert/w1"] = "mlp.shared_experts.gate_proj.weight";
  n.dense["shared_expert/w3"] = "mlp.shared_experts.up_proj.weight";
  n.dense["shared_expert/w2"] = "mlp.shared_experts.down_proj.weight";
}

const ModelFamily kDeepseekV2{.name = "deepseek_v2",
                              .from_hf = v2_from_hf,
                              .synth = v2_synth,
                              .tensor_names = deepseek_tensor_names,
                              .rope_interleaved = [](const HfConfig&) { return true; }};

}  // namespace moerun::model::families

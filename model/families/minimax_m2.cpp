// MiniMax-M2 (transformers' modeling_minimax_m2): GQA without biases, q and k RMSNorm over the
// whole projection (qk_norm_type per_layer, as OLMoE), RoPE on the first rotary_dim of each head,
// experts under block_sparse_moe (Mixtral's w1/w3/w2) chosen by sigmoid scores plus
// e_score_correction_bias, weighted by the chosen scores renormalised; no shared expert. Its
// multi-token prediction modules past num_hidden_layers are not converted.
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  c.num_experts = h.integer("num_local_experts");
  c.intermediate_size = h.integer("intermediate_size");
  c.rotary_dim = read_rotary_dim(h, c.head_dim, 1.0);
  const std::string norm = h.has("qk_norm_type") && h.j["qk_norm_type"].is_string() ? h.j["qk_norm_type"].get<std::string>() : "per_layer";
  if (norm != "per_layer") fail(ErrorKind::BadInput, h.where, ": field qk_norm_type is \"", norm, "\"; supported: per_layer");
  c.qk_norm = QkNorm::Projection;
  const std::string scoring = h.has("scoring_func") && h.j["scoring_func"].is_string() ? h.j["scoring_func"].get<std::string>() : "sigmoid";
  if (scoring != "sigmoid") fail(ErrorKind::BadInput, h.where, ": field scoring_func is \"", scoring, "\"; MiniMax-M2 scores with sigmoid");
  c.router_scoring = RouterScoring::Sigmoid;
  c.router_correction_bias = h.flag_or("use_routing_bias", true);
  c.norm_topk_prob = true;
  c.routed_scaling_factor = h.number_or("routed_scaling_factor", 1.0);
  if (h.flag_or("attention_bias", false))
    fail(ErrorKind::BadInput, h.where, ": field attention_bias is true; not supported for minimax_m2");
  note_unconverted_layers(h, c, note, "num_mtp_modules");
}

// MiniMax-M2's shape at synth's sizes: half of each head rotated, q/k norms over the projection,
// sigmoid routing with a correction bias.
void synth(ModelConfig& m) {
  m.rotary_dim = synth_half_rotary_dim(m.head_dim);
  m.qk_norm = QkNorm::Projection;
  m.router_scoring = RouterScoring::Sigmoid;
  m.router_correction_bias = true;
  m.norm_topk_prob = true;
}

void tensor_names(NameMap& n) {
  n.dense["gate"] = "block_sparse_moe.gate.weight";
  n.dense["gate_correction_bias"] = "block_sparse_moe.e_score_correction_bias";
  n.expert_w1 = "block_sparse_moe.experts.{e}.w1.weight";
  n.expert_w3 = "block_sparse_moe.experts.{e}.w3.weight";
  n.expert_w2 = "block_sparse_moe.experts.{e}.w2.weight";
}

}  // namespace

const ModelFamily kMinimaxM2{.name = "minimax_m2",
                             .rope_theta = 5000000.0,
                             .from_hf = from_hf,
                             .synth = synth,
                             .tensor_names = tensor_names,
                             .unconverted_layers = [](const HfConfig& h) { return h.integer_or("num_mtp_modules", 0); }};

}  // namespace moerun::model::families

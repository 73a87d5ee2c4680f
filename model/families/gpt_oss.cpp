// gpt-oss (transformers' modeling_gpt_oss): attention sinks, biases everywhere, softmax over the
// top-k router logits, the clamped SwiGLU, fused expert tensors (MXFP4 as shipped), sliding and
// full attention alternating, YaRN RoPE.
#include <algorithm>

#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink&) {
  c.num_experts = h.integer("num_local_experts");
  c.intermediate_size = h.integer("intermediate_size");
  c.attention_bias = c.attention_out_bias = h.flag_or("attention_bias", true);
  c.attention_sinks = true;
  c.router_bias = true;
  c.router_scoring = RouterScoring::TopKSoftmax;
  c.expert_bias = true;
  c.expert_activation = ExpertActivation::ClampedSwiGlu;
  c.swiglu_alpha = h.number_or("swiglu_alpha", 1.702);
  c.swiglu_limit = h.number_or("swiglu_limit", 7.0);
  read_layer_types(h, c);
}

void synth(ModelConfig& m) {
  m.attention_bias = m.attention_out_bias = m.attention_sinks = true;
  m.router_bias = m.expert_bias = true;
  m.router_scoring = RouterScoring::TopKSoftmax;
  m.expert_activation = ExpertActivation::ClampedSwiGlu;
  m.sliding_window = std::max<int64_t>(1, std::min<int64_t>(128, m.max_position / 4));
  m.layer_attention.clear();
  for (int64_t l = 0; l < m.num_layers; ++l) m.layer_attention.push_back(l % 2 == 0 ? AttentionKind::Sliding : AttentionKind::Full);
  m.rope.type = RopeType::Yarn;
  m.rope.factor = 32;
  m.rope.original_max_position = 4096;
  m.rope.truncate = false;
}

// No per-expert names: the experts are fused tensors (mlp.experts.gate_up_proj...), read as such by the converter.
void tensor_names(NameMap& n) {
  n.dense["gate"] = "mlp.router.weight";
  n.expert_w1.clear();
  n.expert_w3.clear();
  n.expert_w2.clear();
}

}  // namespace

const ModelFamily kGptOss{.name = "gpt_oss", .rope_theta = 150000.0, .from_hf = from_hf, .synth = synth, .tensor_names = tensor_names};

}  // namespace moerun::model::families

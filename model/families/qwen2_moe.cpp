// Qwen2-MoE (transformers' modeling_qwen2_moe): q/k/v biases, a shared expert behind a sigmoid gate,
// dense layers by decoder_sparse_step and mlp_only_layers; and the config readers Qwen3-MoE shares.
#include "model/families/families.hpp"

namespace moerun::model::families {

bool read_qwen_moe(const HfConfig& h, ModelConfig& c) {
  c.num_experts = h.has("num_experts") ? h.integer("num_experts") : h.integer("num_local_experts");
  c.intermediate_size = h.integer("moe_intermediate_size");
  c.norm_topk_prob = h.flag_or("norm_topk_prob", false);
  read_dense_layers(h, c);
  return h.flag_or("use_sliding_window", false);
}

namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink&) {
  if (read_qwen_moe(h, c)) fail(ErrorKind::BadInput, h.where, ": use_sliding_window is true; not supported for qwen2_moe");
  c.shared_expert_intermediate_size = h.integer("shared_expert_intermediate_size");
  c.attention_bias = true;  // Qwen2 always has q, k, v biases
}

void synth(ModelConfig& m) {
  m.attention_bias = true;
  m.shared_expert_intermediate_size = 2 * m.intermediate_size;
}

}  // namespace

const ModelFamily kQwen2Moe{.name = "qwen2_moe", .from_hf = from_hf, .synth = synth};

}  // namespace moerun::model::families

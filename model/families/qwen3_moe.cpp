// Qwen3-MoE (transformers' modeling_qwen3_moe): per-head q/k RMSNorm, no shared expert, optional
// biases on q, k, v and o alike, an optional sliding window on every layer.
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink&) {
  const bool sliding = read_qwen_moe(h, c);
  c.qk_norm = QkNorm::PerHead;
  c.attention_bias = c.attention_out_bias = h.flag_or("attention_bias", false);
  if (sliding) set_all_layers_sliding(c, h.integer("sliding_window"));
}

void synth(ModelConfig& m) {
  m.norm_topk_prob = true;
  m.qk_norm = QkNorm::PerHead;
}

}  // namespace

const ModelFamily kQwen3Moe{.name = "qwen3_moe", .from_hf = from_hf, .synth = synth};

}  // namespace moerun::model::families

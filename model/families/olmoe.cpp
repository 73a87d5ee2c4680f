// OLMoE (transformers' modeling_olmoe): q/k RMSNorm over the whole projection, no biases, softmax
// top-k without renormalisation by default.
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink&) {
  c.num_experts = h.integer("num_experts");
  c.intermediate_size = h.integer("intermediate_size");
  c.norm_topk_prob = h.flag_or("norm_topk_prob", false);
  c.qk_norm = QkNorm::Projection;
  if (h.flag_or("attention_bias", false))
    fail(ErrorKind::BadInput, h.where, ": attention_bias is true; OLMoE's biases (o_proj too) are not supported");
  if (h.has("clip_qkv")) fail(ErrorKind::BadInput, h.where, ": clip_qkv is set; not supported");
}

void synth(ModelConfig& m) {
  m.qk_norm = QkNorm::Projection;
}

}  // namespace

const ModelFamily kOlmoe{.name = "olmoe", .from_hf = from_hf, .synth = synth};

}  // namespace moerun::model::families

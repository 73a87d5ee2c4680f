// Mixtral (transformers' modeling_mixtral): GQA, the experts under block_sparse_moe with w1/w3/w2,
// top-k weights renormalised, an optional sliding window on every layer.
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink&) {
  c.num_experts = h.integer("num_local_experts");
  c.intermediate_size = h.integer("intermediate_size");
  // A window at or beyond the context is full attention; below it, a banded mask on every layer.
  if (h.has("sliding_window") && h.integer("sliding_window") < c.max_position) set_all_layers_sliding(c, h.integer("sliding_window"));
}

void synth(ModelConfig& m) {
  m.norm_topk_prob = true;
}

void tensor_names(NameMap& n) {
  n.dense["gate"] = "block_sparse_moe.gate.weight";
  n.expert_w1 = "block_sparse_moe.experts.{e}.w1.weight";
  n.expert_w3 = "block_sparse_moe.experts.{e}.w3.weight";
  n.expert_w2 = "block_sparse_moe.experts.{e}.w2.weight";
}

}  // namespace

const ModelFamily kMixtral{.name = "mixtral", .from_hf = from_hf, .synth = synth, .tensor_names = tensor_names};

}  // namespace moerun::model::families

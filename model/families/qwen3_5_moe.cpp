// Qwen3.5-MoE (transformers' modeling_qwen3_5_moe, its text model): Qwen3-Next's hybrid layers
// (families.hpp's hybrid helpers) with separate DeltaNet projections as model.h5 keeps them, every
// layer MoE, the top-k always renormalised (its router has no norm_topk_prob). A multimodal
// checkpoint (Qwen3_5MoeForConditionalGeneration) has config.json's text_config and the text model's
// tensors under model.language_model., which convert/hf_checkpoint reads as a text-only one; the text-only
// class's model_type is an alias. The vision tower and the "mtp." module are not converted.
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

// The multimodal RoPE reduced to text positions, where the three sections' positions are one and the
// same and the rotation is the plain one.
void from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  c.num_experts = h.integer("num_experts");
  c.intermediate_size = h.integer("moe_intermediate_size");
  c.norm_topk_prob = true;
  read_hybrid(h, c, note);
  const bool mrope = h.has("rope_parameters") && h.j["rope_parameters"].is_object() && h.j["rope_parameters"].contains("mrope_section");
  if (mrope) note("qwen3_5_moe: multimodal RoPE (mrope_section) on text positions, where it is the plain rotation; images are not read");
}

void synth(ModelConfig& m) {
  synth_hybrid(m);
  m.layer_mlp.clear();  // every layer MoE
}

}  // namespace

const ModelFamily kQwen3_5Moe{
    .name = "qwen3_5_moe",
    .rope_theta = 10000000.0,
    .from_hf = from_hf,
    .synth = synth,
    .unconverted_prefixes = {"mtp.", "model.visual."},
    .dense_source = [](const DenseDataset& ds, const ModelConfig& c, DenseSource& out) { return hybrid_dense_source(ds, c, out, false); },
    .hf_aliases = {"qwen3_5_moe_text"}};

}  // namespace moerun::model::families

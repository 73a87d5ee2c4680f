// DeepSeek-V3 (transformers' modeling_deepseek_v3): DeepSeek-V2's MLA with sigmoid scores, a
// correction bias and groups by their best two (the readers are deepseek_v2.cpp's). Kimi K2 / K2-
// Thinking (model_type kimi_k2, DeepseekV3ForCausalLM) and Kimi K2.5's text model (kimi_k25,
// KimiK25ForConditionalGeneration: language_model.* read as the text model; its vision tower and
// projector are not converted) are this architecture.
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {
void v3_from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  read_deepseek(h, c, note, true);
}
void v3_synth(ModelConfig& m) {
  synth_deepseek(true, m);
}
}  // namespace

const ModelFamily kDeepseekV3{.name = "deepseek_v3",
                              .from_hf = v3_from_hf,
                              .synth = v3_synth,
                              .tensor_names = deepseek_tensor_names,
                              .rope_interleaved = [](const HfConfig& h) { return h.flag_or("rope_interleave", true); },
                              .unconverted_layers = [](const HfConfig& h) { return h.integer_or("num_nextn_predict_layers", 0); },
                              .unconverted_prefixes = {"vision_tower.", "mm_projector."},
                              .hf_aliases = {"kimi_k2", "kimi_k25"}};

}  // namespace moerun::model::families

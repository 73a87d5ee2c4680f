// DeepSeek-V3 (transformers' modeling_deepseek_v3): DeepSeek-V2's MLA with sigmoid scores, a
// correction bias and groups by their best two (the readers are deepseek_v2.cpp's).
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {
void v3_from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) { read_deepseek(h, c, note, true); }
void v3_synth(ModelConfig& m) { synth_deepseek(true, m); }
}  // namespace

const ModelFamily kDeepseekV3{.name = "deepseek_v3",
                              .from_hf = v3_from_hf,
                              .synth = v3_synth,
                              .tensor_names = deepseek_tensor_names,
                              .rope_interleaved = [](const HfConfig& h) { return h.flag_or("rope_interleave", true); },
                              .unconverted_layers = [](const HfConfig& h) { return h.integer_or("num_nextn_predict_layers", 0); }};

}  // namespace moerun::model::families

// The Hugging Face config mapping's helpers that convert's writers need: the families' RoPE layout
// (interleaved pairs to rotate_half rows) and the layers a family does not convert (MTP). The config
// itself is model_config_from_hf (convert/hf_convert.hpp), defined with them in hf_model_config.cpp.
#pragma once
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "model/model_schema.hpp"

namespace moerun::convert {

// Whether the checkpoint's RoPE rows are interleaved pairs (the family says, from config.json).
bool rope_interleaved(const std::string& config_text, const model::ModelConfig& c);
// DeepSeek lays each RoPE part out as interleaved pairs (x0, x1), (x2, x3)...; moe-hdf5 in
// rotate_half order (the evens, then the odds): `w`'s RoPE rows of dataset `ds` reordered so.
void deinterleave_rope(const model::DenseDataset& ds, const model::ModelConfig& c, std::vector<float>& w);
// A tensor of the layers past num_hidden_layers (or under a prefix) the family does not convert.
bool is_mtp_tensor(const std::string& name, const std::string& config_text, const model::ModelConfig& c);

}  // namespace moerun::convert

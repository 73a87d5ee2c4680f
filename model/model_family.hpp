// ModelFamily: one row per architecture moerun runs, registered in one table (model_families()).
// A row holds what differs between the families: the fields of its Hugging Face config.json,
// its checkpoint's tensor names, synth's defaults. Help texts, errors and the converter take the
// supported list from the table; a new family is one file in model/families/ plus its line in
// model_family.cpp.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace moerun::model {

struct HfConfig;  // model/hf_config.hpp
struct NameMap;
struct DenseDataset;  // model/model_schema.hpp

// Where a model.h5 dataset comes from when it is not one checkpoint tensor as it is: the tensor,
// its shape, and the rows (first index) the dataset takes from it, in order (empty: all of them).
struct DenseSource {
  std::string tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> rows;
};

using NoteSink = std::function<void(const std::string&)>;

struct ModelFamily {
  const char* name;  // config.json's model_type, --family, ModelConfig::architecture
  double rope_theta = 10000.0;  // when config.json gives none
  // The family's fields of config.json, after the common ones (sizes, heads, RoPE, top-k) are read.
  void (*from_hf)(const HfConfig& h, ModelConfig& c, const NoteSink& note) = nullptr;
  // synth's defaults for the family, on the shape synth's options gave.
  void (*synth)(ModelConfig& m) = nullptr;
  // The checkpoint's tensor names where they differ from the defaults (hf_config.hpp's NameMap).
  void (*tensor_names)(NameMap& n) = nullptr;
  // Whether the checkpoint's RoPE rows are interleaved pairs (convert de-interleaves them); null: no.
  bool (*rope_interleaved)(const HfConfig& h) = nullptr;
  // Whether DSA's indexer ropes interleaved pairs too (GLM-5; DeepSeek-V3.2's indexer is rotate_half).
  bool indexer_rope_interleaved = false;
  // Layers the checkpoint holds past num_hidden_layers that are not converted (multi-token
  // prediction); null: none.
  int64_t (*unconverted_layers)(const HfConfig& h) = nullptr;
  // Checkpoint tensors under these prefixes are not converted (Qwen3-Next's "mtp." module, Qwen3.5's
  // vision tower).
  std::vector<std::string> unconverted_prefixes = {};
  // A dataset whose tensor differs in name, shape or row order from the default mapping (Qwen3-Next's
  // fused, interleaved projections): fills `out` and returns true; null or false: the default.
  bool (*dense_source)(const DenseDataset& ds, const ModelConfig& c, DenseSource& out) = nullptr;
  // Other model_types that name the family (Qwen3.5-MoE's text-only "qwen3_5_moe_text", Kimi K2.x's
  // "kimi_k2" and "kimi_k25" for DeepSeek-V3).
  std::vector<std::string> hf_aliases = {};
};

const std::vector<const ModelFamily*>& model_families();  // in the order help texts list them
const ModelFamily* find_model_family(const std::string& name);  // null when not supported

}  // namespace moerun::model

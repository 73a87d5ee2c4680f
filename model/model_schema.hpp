// The schema of model.h5's dense part: one row per dataset the config implies, with its shape, how
// it is stored and held, and the checkpoint tensor it comes from. synth and convert write these
// rows, io/model_file reads them into each layer's tensors by name, the layer blocks
// (runtime/blocks) take theirs by the same name, and the parameter counts and memory plans sum them:
// a new tensor is one row here (docs/FORMATS.md lists the same datasets for readers of the file).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace moerun::model {

struct DenseDataset {
  std::string path;  // "/layers/3/wq", "/embed_tokens"
  std::string name;  // "wq", "mlp/w1", "embed_tokens": the path under /layers/L/ (or the root); what the blocks take it by
  int64_t layer = -1;
  std::vector<int64_t> shape;  // as stored
  bool float32 = false;  // stored as float32 whatever the model's dtype (the decay's parameters, correction bias)
  bool matrix = false;  // held as a matrix in the stored dtype; otherwise widened to float32 at load
  bool float32_matrix = false;  // held as a float32 matrix (the gate: its logits are computed in float32)
  // --quantize-dense quantizes it: the LM head, the GQA/MHA attention projections, Gated DeltaNet's
  // q/k/v and z projections and out_proj, the shared experts and the dense MLPs (not MLA's matrices,
  // the gates, DeltaNet's small b/a projections, norms or the embedding).
  bool quantizable = false;
  bool parameter = true;  // a model parameter (DeepSeek-V3's correction bias is a buffer, as transformers counts)
  // An RMSNorm weight of the (1 + w) form where the config sets norm_weight_offset (Qwen3-Next's
  // input, post-attention, q/k and final norms; not its gated DeltaNet norm).
  bool norm_offset = false;
  // The Hugging Face tensor it is converted from, in Qwen's names: under "model.layers.L." for a
  // layer's, whole for the model-wide ones. A family renames through NameMap::dense (model/hf_config)
  // or takes it from a fused tensor (ModelFamily::dense_source).
  std::string checkpoint;
  int64_t elements() const;
};

// Every dense dataset of a model of this config, in write order.
std::vector<DenseDataset> dense_datasets(const ModelConfig& c);

// Sums over the rows: the dense parameters, and the --quantize-dense matrices' elements.
int64_t dense_params(const ModelConfig& c);
int64_t quantizable_elements(const ModelConfig& c);

}  // namespace moerun::model

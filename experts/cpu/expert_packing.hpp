// The CPU backend's resident form of an expert: its matrices in oneDNN's preferred blocked layout
// for the row counts experts see (a few dozen to a few hundred per call), or for q8/q4 experts in
// quant_matmul's blocked form (packed bytes, 8.5 or 5 bits per weight). Packing happens after the
// checksum was verified on the raw bytes.
#pragma once
#include "base/matmul.hpp"
#include "base/swiglu_ffn.hpp"
#include "io/expert_shards.hpp"
#include "model/model_config.hpp"

namespace moerun::experts {

// Packs an expert straight from its raw form (w1‖w3‖w2 as stored) into `into`, reusing its buffers.
void pack_expert_from_raw(Matmul& mm, const void* raw, const model::ModelConfig& c, FfnWeights& into);
// Shapes `w` as one packed expert and sizes (and touches) its buffers, so loads into it never
// allocate, and bytes packed before can be read straight into it.
void preallocate_expert(Matmul& mm, const model::ModelConfig& c, FfnWeights& w);
// Bytes one packed expert of this model really takes in memory on this machine (its buffers'
// allocated sizes, padding included): what an L1 slot costs, and what --l1-bytes counts.
int64_t packed_expert_bytes(Matmul& mm, const model::ModelConfig& c);
// The experts' activation as the model's config gives it.
inline FfnActivation activation_of(const model::ModelConfig& c) {
  return {c.expert_activation == model::ExpertActivation::ClampedSwiGlu, static_cast<float>(c.swiglu_alpha),
          static_cast<float>(c.swiglu_limit)};
}
// The packed layout of an expert of this model on this machine (see Matmul::packed_layout_name).
std::string expert_layout_name(Matmul& mm, const model::ModelConfig& c);
// The NaN/Inf scan of an expert read back packed from L2 (its floats, or its fp16 scales): BadInput
// naming `where` and the expert's `group`.
void check_packed_finite(FfnWeights& w, const model::ModelConfig& c, const std::string& where, const std::string& group);

}  // namespace moerun::experts

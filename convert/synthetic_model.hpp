// Synthetic moe-hdf5 models (`moerun synth`): deterministic for a seed, each tensor drawn from its
// own stream (seed, tensor name), scaled by 1/sqrt(fan_in) so activations stay O(1) through the
// layers and greedy decoding is not degenerate.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.hpp"

namespace moerun::convert {

struct SynthConfig {
  model::ModelConfig model;
  int shards = 2;
  uint64_t seed = 1;
  bool config_only = false;
  // > 0: skewed expert usage, as in real Mixtral traffic: every embedding shares a direction and
  // each layer's gate favours a seeded ranking of experts along it, the r-th by -gate_skew*ln(r+1)
  // in the logit (0: the plain random gate, bitwise as before).
  double gate_skew = 0;
  // > 0 (with gate_skew): the vocabulary splits into this many contiguous topics, each with its own
  // direction in the embeddings, its own expert ranking in every gate, and a bias in the LM head
  // towards its own tokens, so a request drawn from one topic keeps routing to that topic's experts
  // (a workload for expert-similarity batching).
  int64_t gate_topics = 0;
  void validate() const;
};

// Sets the architecture and the layer variants of a family as `convert` sets them from its config
// (model/model_family.hpp: any of supported_architectures()), leaving the sizes; Usage error for another name.
// gpt_oss: sliding layers first then alternating, window min(128, max_position / 4), yarn x32 from
// 4096, as its published config; qwen2_moe: a shared expert of 2 x intermediate_size.
void apply_family(const std::string& family, model::ModelConfig& m);

// Deterministic N(0, 1) * scale values for `name` (Box-Muller on splitmix64; portable).
std::vector<float> synth_tensor(uint64_t seed, const std::string& name, int64_t count, float scale, float offset = 0.0f);

// Writes DIR/model.h5 and DIR/experts-*.h5; a line per shard on stderr unless quiet.
void write_synthetic_model(const std::string& dir, const SynthConfig& cfg, bool quiet);

}  // namespace moerun::convert

// ModelConfig: the hyper-parameters of a moe-hdf5 model (root attributes of model.h5, DESIGN §3),
// their validation, and the parameter/byte arithmetic that `inspect` and the stats report.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "io/weight_format.hpp"

namespace moerun::io {

// Bounds that validate() enforces before anything is sized from a model's attributes.
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;
inline constexpr int64_t kMaxHidden = int64_t{1} << 17;
inline constexpr int64_t kMaxLayers = int64_t{1} << 12;
inline constexpr int64_t kMaxHeads = int64_t{1} << 12;
inline constexpr int64_t kMaxHeadDim = int64_t{1} << 12;
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 20;
inline constexpr int64_t kMaxExperts = int64_t{1} << 14;
inline constexpr int64_t kMaxTopK = 256;
inline constexpr int64_t kMaxPosition = int64_t{1} << 26;
inline constexpr int64_t kMaxMatrixElements = int64_t{1} << 34;  // 64 GiB in float32
inline constexpr int64_t kMaxExpertTable = int64_t{1} << 20;     // layers x experts

struct ModelConfig {
  std::string architecture = "mixtral";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  int64_t max_position = 0;
  DType dtype = DType::F32;
  WeightFormat expert_format;  // of the experts: {dtype, plain} unless the file says otherwise
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 0;
  // Architecture variants (docs/FORMATS.md). The defaults are Mixtral's; qwen2_moe and olmoe
  // checkpoints converted from Hugging Face set them as their configs say.
  bool norm_topk_prob = true;                   // renormalise the top-k weights to sum 1 (false: raw softmax probabilities)
  int64_t shared_expert_intermediate_size = 0;  // > 0: a dense shared expert with a sigmoid gate on every token (qwen2_moe)
  bool attention_bias = false;                  // biases on the q, k and v projections (qwen2_moe)
  bool qk_norm = false;                         // RMSNorm over the whole q and k projections before RoPE (olmoe)
  // Integrity (format version 2): model.h5's record of its expert shards, one identity per shard
  // file in name order (shard_identity). Empty for a version-1 file, which binds no shards.
  int64_t format_version = 2;
  std::vector<uint64_t> shard_ids;

  // Throws ErrorKind::BadInput naming `where` and the attribute that is out of range.
  void validate(const std::string& where) const;

  // Parameter counts (elements, not bytes).
  int64_t params_per_expert() const { return 3 * hidden_size * intermediate_size; }
  int64_t expert_params() const { return num_layers * num_experts * params_per_expert(); }
  int64_t dense_params() const;
  int64_t total_params() const { return dense_params() + expert_params(); }
  // Parameters applied to one token: all dense ones plus top_k experts per layer.
  int64_t active_params_per_token() const { return dense_params() + num_layers * top_k * params_per_expert(); }
  int64_t bytes_per_expert() const { return params_per_expert() * static_cast<int64_t>(dtype_size(dtype)); }
  // KV cache bytes per token of context (fp32 K and V for every layer).
  int64_t kv_bytes_per_token() const { return num_layers * 2 * num_kv_heads * head_dim * 4; }
};

DType parse_dtype(const std::string& name, const std::string& where);

// The architectures this build runs, for messages ("mixtral, qwen2_moe, olmoe").
const char* supported_architectures();

}  // namespace moerun::io

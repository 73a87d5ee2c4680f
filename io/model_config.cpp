// ModelConfig validation and size arithmetic.
#include "io/model_config.hpp"

#include <cmath>

#include "base/error.hpp"

namespace moerun::io {

DType parse_dtype(const std::string& name, const std::string& where) {
  if (name == "float32") return DType::F32;
  if (name == "bfloat16") return DType::BF16;
  fail(ErrorKind::BadInput, where, ": dtype is \"", name, "\", expected \"float32\" or \"bfloat16\"");
}

const char* supported_architectures() { return "mixtral, qwen2_moe, olmoe"; }

void ModelConfig::validate(const std::string& where) const {
  auto positive = [&](const char* name, int64_t v) {
    if (v <= 0) fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", v, ", expected > 0");
  };
  if (architecture != "mixtral" && architecture != "qwen2_moe" && architecture != "olmoe")
    fail(ErrorKind::BadInput, where, ": attribute architecture is \"", architecture, "\"; supported: ", supported_architectures());
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_layers", num_layers);
  positive("num_heads", num_heads);
  positive("num_kv_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("intermediate_size", intermediate_size);
  positive("num_experts", num_experts);
  positive("top_k", top_k);
  positive("max_position", max_position);
  // Upper bounds, checked before anything is sized from these values: a corrupt or hostile file
  // must not overflow the arithmetic below or allocate before it is rejected. Each bound is far
  // above any published MoE model (vocab 256k, d 16k, 256 experts, 128 layers).
  auto at_most = [&](const char* name, int64_t v, int64_t limit) {
    if (v > limit) fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", v, ", expected <= ", limit);
  };
  at_most("vocab_size", vocab_size, kMaxVocab);
  at_most("hidden_size", hidden_size, kMaxHidden);
  at_most("num_layers", num_layers, kMaxLayers);
  at_most("num_heads", num_heads, kMaxHeads);
  at_most("num_kv_heads", num_kv_heads, kMaxHeads);
  at_most("head_dim", head_dim, kMaxHeadDim);
  at_most("intermediate_size", intermediate_size, kMaxIntermediate);
  at_most("num_experts", num_experts, kMaxExperts);
  at_most("max_position", max_position, kMaxPosition);
  at_most("top_k", top_k, kMaxTopK);
  // Products: every weight matrix, the expert count of the model, the parameters in total. With
  // the bounds above none of these overflows int64 (at most 2^17 * 2^24 = 2^41 for one matrix).
  auto product_at_most = [&](const char* what, int64_t a, int64_t b, int64_t limit) {
    if (a * b > limit) fail(ErrorKind::BadInput, where, ": ", what, " is ", a, " x ", b, ", more than ", limit);
  };
  product_at_most("embed_tokens/lm_head [vocab_size, hidden_size]", vocab_size, hidden_size, kMaxMatrixElements);
  product_at_most("wq [num_heads*head_dim, hidden_size]", num_heads * head_dim, hidden_size, kMaxMatrixElements);
  product_at_most("w1 [intermediate_size, hidden_size]", intermediate_size, hidden_size, kMaxMatrixElements);
  product_at_most("the expert table num_layers x num_experts", num_layers, num_experts, kMaxExpertTable);
  if (shared_expert_intermediate_size < 0)
    fail(ErrorKind::BadInput, where, ": attribute shared_expert_intermediate_size is ", shared_expert_intermediate_size, ", expected >= 0");
  at_most("shared_expert_intermediate_size", shared_expert_intermediate_size, kMaxIntermediate);
  product_at_most("shared_expert/w1 [shared_expert_intermediate_size, hidden_size]", shared_expert_intermediate_size, hidden_size,
                  kMaxMatrixElements);
  if (num_heads % num_kv_heads != 0)
    fail(ErrorKind::BadInput, where, ": attribute num_kv_heads (", num_kv_heads, ") does not divide num_heads (", num_heads, ")");
  if (head_dim % 2 != 0) fail(ErrorKind::BadInput, where, ": attribute head_dim is ", head_dim, ", expected even (RoPE rotates pairs)");
  if (top_k > num_experts)
    fail(ErrorKind::BadInput, where, ": attribute top_k (", top_k, ") exceeds num_experts (", num_experts, ")");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta))
    fail(ErrorKind::BadInput, where, ": attribute rope_theta is ", rope_theta, ", expected a finite number > 0");
  if (!(rms_norm_eps > 0) || rms_norm_eps > 1)
    fail(ErrorKind::BadInput, where, ": attribute rms_norm_eps is ", rms_norm_eps, ", expected in (0, 1]");
  if (bos_token_id < 0 || bos_token_id >= vocab_size)
    fail(ErrorKind::BadInput, where, ": attribute bos_token_id is ", bos_token_id, ", expected in [0, ", vocab_size, ")");
  if (eos_token_id < 0 || eos_token_id >= vocab_size)
    fail(ErrorKind::BadInput, where, ": attribute eos_token_id is ", eos_token_id, ", expected in [0, ", vocab_size, ")");
}

int64_t ModelConfig::dense_params() const {
  const int64_t d = hidden_size;
  const int64_t q = num_heads * head_dim;
  const int64_t kv = num_kv_heads * head_dim;
  int64_t per_layer = d /*attn_norm*/ + q * d + 2 * kv * d + d * q + d /*ffn_norm*/ + num_experts * d;
  if (attention_bias) per_layer += q + 2 * kv;
  if (qk_norm) per_layer += q + kv;
  if (shared_expert_intermediate_size > 0) per_layer += 3 * shared_expert_intermediate_size * d + d;
  return 2 * vocab_size * d + d + num_layers * per_layer;
}

}  // namespace moerun::io

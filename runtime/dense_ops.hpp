// Dense ops of the router rank (DESIGN §2), as kernels over raw spans: embedding lookup, RMSNorm,
// RoPE in the rotate_half convention, residual add. All fp32.
#pragma once
#include <cstdint>
#include <vector>

#include "base/dtype.hpp"
#include "io/model_file.hpp"
#include "model/model_config.hpp"

namespace moerun::runtime {

// Elements from which the row-wise and elementwise ops (norms, gates, the DeltaNet conv) share the
// work among the threads: a prompt's rows (128 tokens x 1024), not one token's. Each element is
// computed alike on any thread, so the bits do not change.
inline constexpr int64_t kParallelElements = 32768;

// Rows `ids` of `table` [vocab, d] (float32, or bfloat16 bits) as float32 into out [T, d].
void embed_tokens(const io::EmbeddingTable& table, const int32_t* ids, int64_t T, float* out);
// out = x * rsqrt(mean(x^2) + eps) * w, per row.
void rms_norm(const float* x, int64_t T, int64_t d, const float* w, float eps, float* out);
// RoPE's inverse frequencies [head_dim / 2] and the factor on cos and sin, as Hugging Face's
// modeling_rope_utils computes them in fp32: default 1 / theta^(2i / head_dim); linear divides
// them by the factor; yarn blends interpolated and extrapolated frequencies over a ramp and scales
// cos and sin by its attention factor; llama3 scales the low frequencies and smooths the middle.
struct RopeFrequencies {
  std::vector<float> inv_freq;
  float attention_scaling = 1.0f;
};
// YaRN's magnitude correction 0.1 * mscale * ln(scale) + 1 (1 for scale <= 1), as transformers' get_mscale.
double yarn_mscale(double scale, double mscale);
RopeFrequencies rope_frequencies(double theta, int64_t head_dim, const model::RopeScaling& scaling = {});
// In place on x [T, heads * head_dim]: x' = (x·cos + rotate_half(x)·sin) at positions[t], cos and
// sin times the attention scaling, over the first 2 * inv_freq.size() dims of each head (all of
// them, or a partial rotary's: GLM-4.5's; the rest pass through).
void rope_apply(float* x, int64_t T, int64_t heads, int64_t head_dim, const int32_t* positions, const RopeFrequencies& rope);
// y += x (n elements)
void add_inplace(float* y, const float* x, int64_t n);
// y[t, :] += b for T rows of n (the bias of a linear layer).
void add_row_bias(float* y, int64_t T, int64_t n, const float* b);
// y[t, :] += sigmoid(x[t, :] · g) * s[t, :] for T rows of d: a shared expert's output s, gated by a
// one-output linear layer g over the expert's input x (Qwen2-MoE).
void add_sigmoid_gated(float* y, const float* s, const float* x, const float* g, int64_t T, int64_t d);
// y *= sigmoid(g), element by element (n elements): Qwen3-Next's gate on its attention output.
void multiply_by_sigmoid(float* y, const float* g, int64_t n);

}  // namespace moerun::runtime

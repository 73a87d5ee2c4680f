// The CUDA backend's elementwise and row kernels. Each launcher enqueues on `stream` and checks the
// launch (CUDA_CHECK); they mirror CPU code bit for bit where the arithmetic allows:
// - f32_to_bf16: round to nearest even, as base/dtype's f32_to_bf16;
// - silu_mul: act = silu(g) * u, in float32, stored as float32 or rounded to bf16 (the CPU FFN's
//   fused epilogues compute the same expression);
// - permute_rows / combine_rows: router/dispatch_plan's permute and slot-order weighted combine;
// - dequantize: base/weight_dequant's element function, the code the CPU runs too.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

#include "base/weight_dequant.hpp"

namespace moerun::experts::kernels {

void f32_to_bf16(const float* in, uint16_t* out, int64_t n, cudaStream_t stream);
void bf16_to_f32(const uint16_t* in, float* out, int64_t n, cudaStream_t stream);
// act[i] = silu(g[i]) * u[i]; `act` is float32 (bf16_out false) or bf16 bits.
void silu_mul(const float* g, const float* u, void* act, bool bf16_out, int64_t n, cudaStream_t stream);
// The biased or clamped activation (gpt-oss), as base/swiglu_ffn's gated_activation: per
// element g += b1, u += b3 (b1, b3 [ff] in the weights' dtype, null without biases), then
// clamped: (clamp(u, -limit, limit) + 1) * min(g, limit) * sigmoid(alpha * min(g, limit)),
// else silu(g) * u; `act` float32 or bf16 bits.
struct GatedActivation {
  const void* b1 = nullptr;
  const void* b3 = nullptr;
  bool bias_bf16 = false;
  bool clamped = false;
  float alpha = 1.702f, limit = 7.0f;
};
void gated_activation(const float* g, const float* u, const GatedActivation& a, void* act, bool bf16_out, int64_t rows, int64_t ff,
                      cudaStream_t stream);
// y[r, i] += b[i] for r < rows, i < d; b in bf16 bits or float32.
void add_row_bias(float* y, const void* b, bool bias_bf16, int64_t rows, int64_t d, cudaStream_t stream);
// out[r] = x[row_token[r]] for r < rows; rows of d floats.
void permute_rows(const float* x, const int32_t* row_token, int64_t rows, int64_t d, float* out, cudaStream_t stream);
// out[t] = sum over k of weight[t*top_k + k] * results[slot_row[t*top_k + k]] (slot order; a
// slot_row of -1 adds nothing), for t < tokens.
void combine_rows(const float* results, const int64_t* slot_row, const float* weight, int64_t tokens, int64_t top_k, int64_t d, float* out,
                  cudaStream_t stream);

// out[r, c] = W[r, c] (float32, row-major) for a quantized matrix whose bytes are in device memory.
void dequantize(const dequant::QuantMatrix& w, float* out, cudaStream_t stream);

}  // namespace moerun::experts::kernels

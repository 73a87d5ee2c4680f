// The SwiGLU FFN on the CPU, for routed experts (experts/cpu) and the routers' shared experts and
// dense MLPs (runtime) alike: y = W2 · (silu(W1 x) ⊙ (W3 x)) for a block of gathered rows, as three
// oneDNN GEMMs with the activation fused into their epilogues (no separate pass over the
// [rows, ff] intermediate): G = silu(x·W1ᵀ), A = (x·W3ᵀ) ⊙ G (stored in the weights' dtype), y = A·W2ᵀ.
#pragma once
#include <cstdint>

#include "base/aligned_buffer.hpp"
#include "base/matmul.hpp"
#include "base/quant_matmul.hpp"

namespace moerun {

// Rows per GEMM call the packed layouts are chosen for (experts see a few dozen to a few hundred).
constexpr int64_t kFfnTypicalRows = 128;

// Packs loaded (plain) matrices in place for swiglu_ffn_forward.
void pack_ffn(Matmul& mm, FfnWeights& w);

// The gated activation between the GEMMs: silu(g) * u, or gpt-oss's clamped form
// (u + 1) * g' * sigmoid(alpha * g') with g' = min(g, limit) and u clamped to [-limit, limit].
struct FfnActivation {
  bool clamped = false;
  float alpha = 1.702f, limit = 7.0f;
};

// Scratch reused across calls (grows to the largest block seen).
struct FfnScratch {
  AlignedBuffer x;  // [rows, d] activations in bf16 (bf16 experts only)
  AlignedBuffer g;  // [rows, ff] float32
  AlignedBuffer u;  // [rows, ff] float32 (biased or clamped experts only)
  AlignedBuffer act;  // [rows, ff] float32 or bf16
  QuantizedRows xq, aq;  // q8/q4 experts: x and the activation, quantized per row and group
};

// x: [rows, d] float32; y: [rows, d] float32. Without biases and with plain SwiGLU the activation
// is fused into the GEMMs' epilogues; otherwise one pass over [rows, ff] adds b1, b3 and applies it,
// and b2 is added to y. q8/q4 experts run quant_matmul: x quantized once for w1 and w3, the float32
// activation quantized for w2.
void swiglu_ffn_forward(Matmul& mm, const float* x, int64_t rows, const FfnWeights& w, float* y, FfnScratch& scratch,
                        const FfnActivation& activation = {});

}  // namespace moerun

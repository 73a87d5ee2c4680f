// SwiGLU expert FFN on the CPU: y = W2 · (silu(W1 x) ⊙ (W3 x)) for a block of gathered rows, as three
// oneDNN GEMMs with the activation fused into their epilogues (no separate pass over the
// [rows, ff] intermediate): G = silu(x·W1ᵀ), A = (x·W3ᵀ) ⊙ G (stored in the weights' dtype), y = A·W2ᵀ.
#pragma once
#include <cstdint>

#include "base/aligned_buffer.hpp"
#include "base/matmul.hpp"

namespace moerun::experts {

// Scratch reused across calls (grows to the largest block seen).
struct ExpertScratch {
  AlignedBuffer x;    // [rows, d] activations in bf16 (bf16 experts only)
  AlignedBuffer g;    // [rows, ff] float32
  AlignedBuffer act;  // [rows, ff] float32 or bf16
};

// x: [rows, d] float32; y: [rows, d] float32.
void expert_ffn_forward(Matmul& mm, const float* x, int64_t rows, const FfnWeights& w, float* y,
                        ExpertScratch& scratch);

}  // namespace moerun::experts

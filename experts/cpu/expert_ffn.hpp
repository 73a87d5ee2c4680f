// SwiGLU expert FFN on the CPU: y = W2 · (silu(W1 x) ⊙ (W3 x)) for a block of gathered rows, as two
// oneDNN GEMMs (W1 and W3 stacked into one [2ff, d] matrix) and a fused activation between them.
#pragma once
#include <cstdint>

#include "base/aligned_buffer.hpp"
#include "base/matmul.hpp"
#include "io/expert_shards.hpp"

namespace moerun::experts {

// Scratch reused across calls (grows to the largest block seen).
struct ExpertScratch {
  AlignedBuffer h;    // [rows, 2ff] float32
  AlignedBuffer act;  // [rows, ff] float32 or bf16
};

// x: [rows, d] float32; y: [rows, d] float32.
void expert_ffn_forward(Matmul& mm, const float* x, int64_t rows, const io::ExpertWeights& w, float* y,
                        ExpertScratch& scratch);

// act[r, i] = silu(h[r, i]) * h[r, ff + i] for h [rows, 2ff]; written as float32 or bf16.
void swiglu(const float* h, int64_t rows, int64_t ff, float* act_f32);
void swiglu_bf16(const float* h, int64_t rows, int64_t ff, uint16_t* act_bf16);

}  // namespace moerun::experts

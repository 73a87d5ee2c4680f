// Quantized weight formats as stored (moe-hdf5, docs/FORMATS.md): rows of a weight matrix W[rows,
// cols] cut into groups of 32 along cols (the input dimension), each group with its own fp16 scale.
//   q8: int8 q per weight, w = d * q (llama.cpp's Q8_0 arithmetic, 8.5 bits per weight);
//   q4: 4-bit q in [0, 15], two per byte (low nibble first), w = d * q + m with an fp16 minimum
//       per group too (Q4_1's arithmetic, 5 bits per weight; d and m chosen by least squares);
//   int4: compressed-tensors' pack-quantized INT4 kept as shipped (this file: kInt4ZeroMask and the level byte): 4-bit u
//       two per byte as q4, a bf16 or fp16 scale s and a zero level z per group, w = (u - z) * s.
// Quantization is deterministic (no threads, no randomness) and per row, so it streams.
#pragma once
#include <cstddef>
#include <cstdint>

namespace moerun {

// How a matrix's weights are stored: plain elements of its dtype, or one of the quantized schemes.
// Mxfp4 and Fp8Block are gpt-oss's and DeepSeek-V3's native forms, kept as shipped; the CPU backend
// computes with them directly (base/native_matmul.hpp).
enum class WeightScheme {
  Plain,  // one element of the dtype per weight
  Q8,  // int8 in groups of 32 with an fp16 scale
  Q4,  // 4-bit in groups of 32 with an fp16 scale and minimum
  Int4,  // 4-bit in groups of 32 with a bf16 or fp16 scale and a zero level (compressed-tensors)
  Mxfp4,  // E2M1 pairs with an E8M0 scale per 32 (gpt-oss)
  Fp8Block,  // e4m3 with 128x128 block scales (DeepSeek-V3)
};

inline constexpr int64_t kQuantGroup = 32;  // weights per scale

// q8, q4 and int4 (the weight-format table's rows with Group kernels).
bool is_group_quantized(WeightScheme s);

// int4's level byte per group: the zero level z (8 for a symmetric scheme) in bits 0-3, and bit 7
// set when the group's scale is fp16 bits (else bf16): the scale's type travels with every group,
// so the kernels need no other parameter.
inline constexpr uint8_t kInt4ZeroMask = 0x0f;
inline constexpr uint8_t kInt4F16Scale = 0x80;
// Bytes of one row's quantized values: cols (q8) or cols / 2 (q4, int4).
int64_t quant_row_bytes(WeightScheme s, int64_t cols);
// 16-bit values per row in the scales: one per group (q8; int4, whose level bytes are apart), or a
// scale and a minimum per group (q4, interleaved d0 m0 d1 m1 ...).
int64_t quant_row_scales(WeightScheme s, int64_t cols);

// Quantizes `rows` rows of float32 x [rows, cols] (cols a multiple of 32) into q [rows,
// quant_row_bytes] and scales [rows, quant_row_scales] (fp16 bits; int4: bf16 bits, and its level
// bytes [rows, cols / 32] in `levels`). x must be finite.
void quantize_rows(WeightScheme s, const float* x, int64_t rows, int64_t cols, uint8_t* q, uint16_t* scales, uint8_t* levels = nullptr);
// The weights those bytes stand for, exactly (every product d * q + m in float32; int4 as
// base/weight_dequant.hpp says).
void dequantize_rows(WeightScheme s, const uint8_t* q, const uint16_t* scales, int64_t rows, int64_t cols, float* out,
                     const uint8_t* levels = nullptr);

}  // namespace moerun

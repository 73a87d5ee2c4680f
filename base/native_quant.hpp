// The native quantized forms models ship their experts in, kept as they are:
//   mxfp4 (OCP Microscaling, gpt-oss): blocks of 32 E2M1 values, two per byte (low nibble first),
//     and one E8M0 scale byte per block (2^(s - 127)): 4.25 bits per weight;
//   fp8-block (DeepSeek-V3/R1): one float8 e4m3fn byte per weight and a float32 scale per 128x128
//     block of the matrix (weight_scale_inv; w = e4m3 * scale), partial blocks at the edges.
// Quantization here is for synth and convert --quantize (deterministic, round-to-nearest-even);
// dequantization is exact where the values allow it (mxfp4 always, fp8-block up to the one float32
// rounding of the product, as DeepSeek's own weight_dequant).
#pragma once
#include <cstdint>

namespace moerun {

inline constexpr int64_t kMxfp4Block = 32;  // values per scale
inline constexpr int64_t kMxfp4BlockBytes = kMxfp4Block / 2;
inline constexpr int64_t kFp8Block = 128;  // rows and columns per scale
inline constexpr uint8_t kE8m0Nan = 255;  // the one E8M0 code that is not a power of two

float e4m3_to_f32(uint8_t v);  // NaN for 0x7f / 0xff
// Round to nearest even, saturating at +-448 (the largest e4m3fn value); NaN gives 0x7f.
uint8_t f32_to_e4m3(float f);
inline bool e4m3_is_nan(uint8_t v) {
  return (v & 0x7f) == 0x7f;
}
// A block scale the kernels take: finite and below 2^64 in magnitude. Below 2^119 every weight it
// scales (at most 448 times it) would still be a float32, but not its products: a scale of 2^118
// overflowed the GEMMs and gave NaN logits (issue 63). Below 2^64 the weights stay under 2^73, and a
// dot product over up to 2^20 inputs stays finite for inputs under 2^34; real checkpoints' scales
// are below 1. "2^64" in kFp8ScaleBound names it in messages.
inline constexpr float kFp8MaxScale = 0x1p64f;
inline constexpr const char* kFp8ScaleBound = "2^64";
inline bool fp8_scale_ok(float s) {
  return s == s && s < kFp8MaxScale && s > -kFp8MaxScale;
}

// out[r, g*32 + 2i] = e2m1(blocks[r, g, i] & 15) * 2^(scales[r, g] - 127), the high nibble at 2i + 1,
// for `rows` rows of `groups` blocks: what transformers' convert_moe_packed_tensors computes,
// before its transpose. Exact: every value is a float32 (an E8M0 scale of 255 gives Inf or NaN,
// which the caller's finite check names).
void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups, float* out);
// The inverse for finite x [rows, groups * 32]: per block the least exponent with max|x| <= 6 * 2^e
// (the OCP rule), each value rounded to nearest even E2M1. Values that are already MXFP4 (an
// MXFP4 checkpoint dequantized) come back as the same floats.
void quantize_mxfp4(const float* x, int64_t rows, int64_t groups, uint8_t* blocks, uint8_t* scales);

// Scales of a [rows, cols] fp8-block matrix: ceil(rows / 128) x ceil(cols / 128).
inline int64_t fp8_scale_rows(int64_t rows) {
  return (rows + kFp8Block - 1) / kFp8Block;
}
inline int64_t fp8_scale_cols(int64_t cols) {
  return (cols + kFp8Block - 1) / kFp8Block;
}
// Rows [r0, r1) of q [rows, cols] dequantized into out [(r1 - r0), cols]: e4m3(q) * scale of its block.
void dequantize_fp8_block(const uint8_t* q, const float* scales, int64_t cols, int64_t r0, int64_t r1, float* out);
// The inverse for finite x [rows, cols]: per block scale = max|x| / 448 (1 for an all-zero block),
// q = e4m3(x / scale).
void quantize_fp8_block(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* scales);

}  // namespace moerun

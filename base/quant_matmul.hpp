// Matmul on group-quantized weights (q8, q4; base/quant_format.hpp) in a blocked resident form,
// with the activations quantized per row and group to int8 as llama.cpp does: integer dot products
// (AVX-512 VNNI vpdpbusd, or a portable loop with the same arithmetic) scaled per group. The weights
// are read once per pass of up to 4 rows, in their packed bytes (8.5 or 5 bits per weight).
#pragma once
#include <cstdint>

#include "base/aligned_buffer.hpp"
#include "base/quant_format.hpp"

namespace moerun {

// How quant_matmul takes the activations. Int8: quantized per row in groups of 32, integer dot
// products with VNNI (decode, a few rows). Bf16: rows rounded to bfloat16, the weights dequantized
// to bf16 a 16x32 chunk at a time straight into AMX tiles (prefill, where the int8 path is bound by
// its per-group scaling; needs AMX-BF16). Auto: Bf16 from kQuantAmxMinRows rows where the CPU has
// AMX, else Int8.
enum class ActivationForm { Auto, Int8, Bf16 };
inline constexpr int64_t kQuantAmxMinRows = 16;

// Activations x [M, K] in one of those forms. Int8: x ≈ dx[g] * q[k]; qsum[g] = Σ q over the group
// (q8's offset correction), xsum[g] = Σ x (q4's minimum term, exact).
struct QuantizedRows {
  int64_t rows = 0, cols = 0;
  ActivationForm form = ActivationForm::Int8;
  AlignedBuffer bf16;  // Bf16: [rows rounded up to 32, cols], padding rows zero
  AlignedBuffer q;     // int8 [rows, cols]
  AlignedBuffer dx;    // float [rows, cols / 32]
  AlignedBuffer qsum;  // int32 [rows, cols / 32]
  AlignedBuffer xsum;  // float [rows, cols / 32]
};

// Converts x [M, K] (K a multiple of 32) into `out` in `form`, reusing its buffers.
void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows& out, ActivationForm form = ActivationForm::Auto);

// The blocked form of W [N, K] (rows N = outputs): blocks of 16 output rows, and in each, per group
// of 32 k, the 16 rows' quantized values interleaved for vpdpbusd (4 consecutive k of one row per
// 32-bit lane) followed by their fp16 scales:
//   q8: 8 x 64 bytes (k-quad j: row n's q[32g+4j..+3] + 128 as uint8), 16 d   = 544 bytes;
//   q4: 4 x 64 bytes (low nibbles k-quad j, high nibbles k-quad j+4), 16 d, 16 m = 320 bytes.
// Rows past N are zero (weights and scales) up to a multiple of 16.
int64_t quant_blocked_bytes(WeightScheme s, int64_t N, int64_t K);
// Stored rows (quantize_rows' q and scales for W [N, K]) into that form; `out` has
// quant_blocked_bytes.
void quant_pack(WeightScheme s, const uint8_t* q, const uint16_t* scales, int64_t N, int64_t K, uint8_t* out);
// The fp16 values (scales, q4's minimums) of a blocked matrix, padding rows included, copied out
// in block order (for the NaN/Inf scan of a form read back from the L2 cache).
int64_t quant_blocked_scales(WeightScheme s, int64_t N, int64_t K);
void quant_blocked_copy_scales(WeightScheme s, int64_t N, int64_t K, const uint8_t* w, uint16_t* out);

// y[M, N] = x · Wᵀ for W in the blocked form. Threads: the OpenMP team (when not already inside a
// parallel region), over pairs of 16-row blocks. `portable` forces the loop without VNNI, whose
// results are bitwise the same (Int8 form; the Bf16 form always runs AMX).
void quant_matmul(WeightScheme s, const QuantizedRows& x, int64_t N, const uint8_t* w, float* y, bool portable = false);

// Whether this CPU runs the VNNI kernel (AVX-512F, BW and VNNI); else quant_matmul runs the loop.
bool quant_vnni_supported();
// Whether it runs the AMX-BF16 kernel (and the OS granted this process the tile state).
bool quant_amx_supported();

}  // namespace moerun

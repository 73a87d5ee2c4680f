// Matmul on group-quantized weights (q8, q4; base/quant_format.hpp) in a blocked resident form,
// with the activations quantized per row and group to int8 as llama.cpp does: integer dot products
// (AVX-512 VNNI vpdpbusd, or a portable loop with the same arithmetic) scaled per group. The weights
// are read once per pass of up to 4 rows, in their packed bytes (8.5 or 5 bits per weight).
#pragma once
#include <cstdint>

#include "base/aligned_buffer.hpp"
#include "base/quant_format.hpp"

namespace moerun {

// Activations x [M, K] quantized per row in groups of 32: x ≈ dx[g] * q[k]; qsum[g] = Σ q over the
// group (q8's offset correction), xsum[g] = Σ x (q4's minimum term, exact).
struct QuantizedRows {
  int64_t rows = 0, cols = 0;
  AlignedBuffer q;     // int8 [rows, cols]
  AlignedBuffer dx;    // float [rows, cols / 32]
  AlignedBuffer qsum;  // int32 [rows, cols / 32]
  AlignedBuffer xsum;  // float [rows, cols / 32]
};

// Quantizes x [M, K] (K a multiple of 32) into `out`, reusing its buffers.
void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows& out);

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
// results are bitwise the same.
void quant_matmul(WeightScheme s, const QuantizedRows& x, int64_t N, const uint8_t* w, float* y, bool portable = false);

// Whether this CPU runs the VNNI kernel (AVX-512F, BW and VNNI); else quant_matmul runs the loop.
bool quant_vnni_supported();

}  // namespace moerun

// Matmul on group-quantized weights (q8, q4, int4; base/quant_format.hpp) in a blocked resident form,
// with the activations quantized per row and group to int8 as llama.cpp does. Integer dot products
// per group of 32, then one float step per group: y += (Σ qw qx - offset) * (dw dx) (+ m Σx for q4).
// Three kernels compute exactly those numbers, so their results are bitwise equal whatever the row
// count or CPU: AVX-512 VNNI vpdpbusd for a few rows (decode: the weights read once per pass of up to
// 4 rows, in their packed bytes), AMX-INT8 tdpbsud for many (prefill: the blocked bytes are already
// AMX B tiles for q8; q4 unpacks its nibbles), and a portable loop.
#pragma once
#include <cstdint>

#include "base/aligned_buffer.hpp"
#include "base/quant_format.hpp"

namespace moerun {

// Activations x [M, K] quantized per row in groups of 32: x ≈ dx[g] * q[k]; qinit[g] = -128 Σ q over
// the group (q8's weights are stored + 128: its offset correction, where the integer sum starts),
// xsum[g] = Σ x (q4's minimum term, exact). Rows are padded to a multiple of 32 with zeros (AMX reads whole tiles).
struct QuantizedRows {
  int64_t rows = 0, cols = 0;
  AlignedBuffer q;  // int8 [padded rows, cols]
  AlignedBuffer dx;  // float [padded rows, cols / 32]
  AlignedBuffer qinit;  // int32 [padded rows, cols / 32]
  AlignedBuffer xsum;  // float [padded rows, cols / 32]
  AlignedBuffer qsum;  // float [padded rows, cols / 32]: Σ q (int4's zero-level term, exact)
};

// Quantizes x [M, K] (K a multiple of 32) into `out`, reusing its buffers.
void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows& out);

// The blocked form of W [N, K] (rows N = outputs): blocks of 16 output rows, and in each, per group
// of 32 k, the 16 rows' quantized values interleaved for vpdpbusd (4 consecutive k of one row per
// 32-bit lane) followed by their fp16 scales:
//   q8: 8 x 64 bytes (k-quad j: row n's q[32g+4j..+3] + 128 as uint8), 16 d   = 544 bytes;
//   q4: 4 x 64 bytes (low nibbles k-quad j, high nibbles k-quad j+4), 16 d, 16 m = 320 bytes;
//   int4: q4's 4 x 64 bytes, 16 16-bit scales, 16 level bytes = 304 bytes (the stored scale and
//         level of the row's group: compressed-tensors' numbers as shipped, 4.75 bits per weight).
// Rows past N are zero (weights and scales) up to a multiple of 16.
int64_t quant_blocked_bytes(WeightScheme s, int64_t N, int64_t K);
// Stored rows (quantize_rows' q and scales for W [N, K], and int4's level bytes) into that form;
// `out` has quant_blocked_bytes.
void quant_pack(WeightScheme s, const uint8_t* q, const uint16_t* scales, int64_t N, int64_t K, uint8_t* out,
                const uint8_t* levels = nullptr);
// Plain row-major W [N, K] (float32, or bf16 bits when `bf16`) quantized (quantize_rows) straight
// into that form; one row at a time through float32, so the only extra memory is the quantized
// bytes. `out` has quant_blocked_bytes.
void quant_pack_plain(WeightScheme s, const void* plain, bool bf16, int64_t N, int64_t K, uint8_t* out);
// The first scale (or q4 minimum, int4 minimum term) of a blocked matrix that is not finite, as
// its index in block order (chunk * 16 + lane), or -1: the NaN/Inf scan of a form read back from a
// cache file.
int64_t quant_blocked_find_bad(WeightScheme s, int64_t N, int64_t K, const uint8_t* w);

enum class QuantKernel {
  Auto,  // AMX from kQuantAmxMinRows rows where the CPU has it, else VNNI where it has that, else Portable
  Portable,
  Vnni,  // AVX-512F, BW and VNNI
  Amx,  // AMX-TILE and AMX-INT8 (and the OS granting this process the tile state)
};
inline constexpr int64_t kQuantAmxMinRows = 16;
bool quant_kernel_supported(QuantKernel k);
// What Auto runs for M rows on this CPU.
QuantKernel quant_kernel_for(int64_t M);
const char* quant_kernel_name(QuantKernel k);

// y[M, N] = x · Wᵀ for W in the blocked form. Threads: the OpenMP team (when not already inside a
// parallel region), over the blocks of 16 output rows. A kernel this CPU lacks is an Internal error.
void quant_matmul(WeightScheme s, const QuantizedRows& x, int64_t N, const uint8_t* w, float* y, QuantKernel kernel = QuantKernel::Auto);

}  // namespace moerun

// Matmul on the native quantized forms (mxfp4, fp8-block; base/native_quant.hpp) with float32
// activations, the weights decoded exactly in registers. Each output is one lane's fixed sequence of
// operations whatever the row count, tile or kernel, so the AVX-512 and portable kernels give the
// same bits, and a row gives the same bits alone or in a batch:
//   mxfp4:     each row's group of 32 x as three int8 digits on a power-of-two scale s (24 bits
//              below the group's largest |x|, error <= s 2^-15 per element); per group three exact
//              integer dot products with 2 e2m1 (vpdpbusd), combined exactly in an int32 T; then
//              acc = fma(float(T), 2^(e8m0 - 127) * s 2^-16, acc). As accurate as float32 sums of the
//              products (the test's bound), at a third of the instructions of decoding each nibble to
//              a float32 lane.
//   fp8-block: per 128 k: t = 0; t = fma(e4m3(k) / 256, x[k], t) in k order; acc = fma(t, scale * 256, acc)
//              (e4m3 / 256 is what the fp16 widening gives; it and scale * 256 are exact, so each
//              product is e4m3 * scale * x as the reference has it).
#pragma once
#include <cstdint>

#include "base/quant_format.hpp"
#include "base/weight_scheme_table.hpp"

namespace moerun {

// mxfp4 and fp8-block (the weight-format table's rows with Native kernels).
inline bool is_native_quantized(WeightScheme s) {
  return weight_scheme_row(s).kernels == WeightKernels::Native;
}

// The blocked form of W [N, K] (rows N = outputs, K a multiple of 32), blocks of 16 output rows
// (rows past N zero, their mxfp4 scales 1):
//   mxfp4: per block and group of 32 k, 4 x 64 bytes (j, then row r: the row's 4 stored bytes of k =
//     32g + 8j .. + 7, so nibble m of that 32-bit lane is k = 32g + 8j + m), then the 16 rows' E8M0
//     scales: 272 bytes per 512 weights, as stored;
//   fp8-block: per block, per k, the 16 rows' e4m3 bytes; after every block the float32 scales
//     [ceil(N/128), ceil(K/128)] as stored.
int64_t native_blocked_bytes(WeightScheme s, int64_t N, int64_t K);
// Stored matrices into that form: mxfp4 `values` [N, K/2] (two E2M1 per byte, low nibble first) and
// `scales` uint8 [N, K/32]; fp8-block `values` [N, K] e4m3fn and `scales` float32 [ceil(N/128), ceil(K/128)].
void native_pack(WeightScheme s, const uint8_t* values, const void* scales, int64_t N, int64_t K, uint8_t* out);
// The first bad scale or value of a blocked matrix, for the NaN/Inf scan of a form read back from L2:
// an E8M0 255, an e4m3 NaN byte, a float32 scale that is not finite or whose weights would overflow
// float32 (|scale| >= 2^64, fp8_scale_ok). Returns its index in the stored order (or -1) and what it is in `what`.
int64_t native_blocked_find_bad(WeightScheme s, int64_t N, int64_t K, const uint8_t* w, const char** what);

enum class NativeKernel {
  Auto,  // AVX-512 where the CPU has it, else Portable
  Portable,
  Avx512,  // mxfp4: AVX-512F, BW, VNNI and VBMI (Ice Lake, Sapphire Rapids, Zen 4); fp8: F, BW and F16C
};
bool native_kernel_supported(WeightScheme s, NativeKernel k);
const char* native_kernel_name(NativeKernel k);

// y[M, N] = x[M, K] · Wᵀ for W in the blocked form. Threads: the OpenMP team (when not already
// inside a parallel region), over runs of 16-row blocks. A kernel this CPU lacks is an Internal error.
void native_matmul(WeightScheme s, const float* x, int64_t M, int64_t K, int64_t N, const uint8_t* w, float* y,
                   NativeKernel kernel = NativeKernel::Auto);

}  // namespace moerun

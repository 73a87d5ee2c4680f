// One weight of a quantized matrix as stored (q8, q4, int4, mxfp4, fp8-block; docs/FORMATS.md), as a
// float32, by functions that compile for the host and for CUDA devices alike: the CUDA backend's
// dequantize kernel runs them on the GPU, and the CPU runs the very same code in its tests (the
// GPU's stand-in where there is none) and in base/'s own conversions. Each is exact: the weight the
// stored bytes stand for, with the one rounding the format defines (q4's d * q + m and fp8's e4m3 *
// scale in float32, int4's (u - z) * s in the scale's own 16-bit type, as compressed-tensors'
// dequantize computes it); the others are exact products of powers of two.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/quant_format.hpp"

#ifdef __CUDACC__
#define MOERUN_HOST_DEVICE __host__ __device__
#else
#define MOERUN_HOST_DEVICE
#endif

namespace moerun::dequant {

MOERUN_HOST_DEVICE inline float float_of_bits(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, 4);
  return f;
#endif
}

// IEEE half (fp16 bits) widened, subnormals, Inf and NaN included.
MOERUN_HOST_DEVICE inline float f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return float_of_bits(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return float_of_bits(sign | ((exp + 112) << 23) | (man << 13));
  if (man == 0) return float_of_bits(sign);
  int e = -1;  // subnormal: normalise
  do {
    man <<= 1;
    ++e;
  } while ((man & 0x400u) == 0);
  return float_of_bits(sign | (static_cast<uint32_t>(112 - e) << 23) | ((man & 0x3ffu) << 13));
}

MOERUN_HOST_DEVICE inline uint32_t bits_of_float(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
#endif
}

// bfloat16 bits widened.
MOERUN_HOST_DEVICE inline float bf16(uint16_t h) {
  return float_of_bits(static_cast<uint32_t>(h) << 16);
}

// x rounded to the nearest bfloat16 (ties to even), as a float; NaN stays NaN.
MOERUN_HOST_DEVICE inline float round_bf16(float x) {
  uint32_t b = bits_of_float(x);
  if ((b & 0x7f800000u) == 0x7f800000u) return x;
  b += 0x7fffu + ((b >> 16) & 1u);
  return float_of_bits(b & 0xffff0000u);
}

// x rounded to the nearest IEEE half (ties to even), as a float: Inf past 65504, subnormals below
// 2^-14 on the grid of 2^-24; NaN stays NaN.
MOERUN_HOST_DEVICE inline float round_f16(float x) {
  const uint32_t b = bits_of_float(x), mag = b & 0x7fffffffu;
  if (mag >= 0x7f800000u) return x;
  if (mag < 0x38800000u) return rintf(x * 0x1p24f) * 0x1p-24f;  // |x| < 2^-14: exact scalings, one rounding
  uint32_t r = mag + 0xfffu + ((mag >> 13) & 1u);
  r &= ~0x1fffu;
  if (r > 0x477fe000u) r = 0x7f800000u;  // past 65504
  return float_of_bits((b & 0x80000000u) | r);
}

// float8 e4m3fn: bias 7, no infinities, 0x7f / 0xff NaN; e = 0 is subnormal (m * 2^-9).
MOERUN_HOST_DEVICE inline float e4m3(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24, e = (v >> 3) & 15u, m = v & 7u;
  if (e == 15 && m == 7) return float_of_bits(0x7fc00000u);
  if (e == 0) return (sign ? -1.0f : 1.0f) * static_cast<float>(m) * 0x1p-9f;
  return float_of_bits(sign | ((e + 120) << 23) | (m << 20));
}

// E2M1 (one MXFP4 nibble): sign, 2 exponent bits, 1 mantissa bit; the values 0, 0.5, 1, 1.5, 2, 3, 4, 6.
MOERUN_HOST_DEVICE inline float e2m1(uint8_t nibble) {
  const uint32_t e = (nibble >> 1) & 3u, m = nibble & 1u;
  const float a = e == 0 ? 0.5f * static_cast<float>(m) : float_of_bits(((e + 126) << 23) | (m << 22));
  return (nibble & 8) ? -a : a;
}

// E8M0 (an MXFP4 scale): 2^(s - 127); 0 is the subnormal 2^-127, 255 is NaN.
MOERUN_HOST_DEVICE inline float e8m0(uint8_t s) {
  if (s == 255) return float_of_bits(0x7fc00000u);
  return s == 0 ? float_of_bits(0x00400000u) : float_of_bits(static_cast<uint32_t>(s) << 23);
}

inline constexpr int64_t kGroup = 32;  // q8, q4, int4, mxfp4: weights per scale along a row
inline constexpr int64_t kFp8Block = 128;  // fp8-block: rows and columns per scale

// Bytes of a [rows, cols] matrix's values and of its scales, as stored.
MOERUN_HOST_DEVICE inline int64_t values_bytes(WeightScheme s, int64_t rows, int64_t cols) {
  return s == WeightScheme::Q4 || s == WeightScheme::Int4 || s == WeightScheme::Mxfp4 ? rows * cols / 2 : rows * cols;
}
MOERUN_HOST_DEVICE inline int64_t scales_bytes(WeightScheme s, int64_t rows, int64_t cols) {
  switch (s) {
    case WeightScheme::Q8: return 2 * rows * (cols / kGroup);
    case WeightScheme::Q4: return 4 * rows * (cols / kGroup);
    case WeightScheme::Int4: return 3 * rows * (cols / kGroup);  // the 16-bit scales, then the level bytes
    case WeightScheme::Mxfp4: return rows * (cols / kGroup);
    case WeightScheme::Fp8Block: return 4 * ((rows + kFp8Block - 1) / kFp8Block) * ((cols + kFp8Block - 1) / kFp8Block);
    default: return 0;
  }
}

// A stored quantized matrix W [rows, cols]: its values and scales as the raw form holds them (int4:
// its level bytes follow its scales).
struct QuantMatrix {
  WeightScheme scheme;
  const uint8_t* values;
  const uint8_t* scales;
  int64_t rows, cols;
  const uint8_t* levels = nullptr;  // int4's level bytes where they do not follow its scales
};

// a * b + c rounded twice, as written (nvcc would otherwise fuse it into one FMA on the device).
MOERUN_HOST_DEVICE inline float mul_add(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(__fmul_rn(a, b), c);
#else
  return a * b + c;  // no FMA in the baseline x86-64 ISA this file is compiled for: two roundings
#endif
}

// W[r, c].
MOERUN_HOST_DEVICE inline float weight(const QuantMatrix& m, int64_t r, int64_t c) {
  const int64_t g = c / kGroup, groups = m.cols / kGroup;
  switch (m.scheme) {
    case WeightScheme::Q8: {
      const auto* sc = reinterpret_cast<const uint16_t*>(m.scales);
      return f16(sc[r * groups + g]) * static_cast<float>(static_cast<int8_t>(m.values[r * m.cols + c]));
    }
    case WeightScheme::Q4: {
      const auto* dm = reinterpret_cast<const uint16_t*>(m.scales) + 2 * (r * groups + g);
      const int level = (m.values[(r * m.cols + c) / 2] >> (4 * (c % 2))) & 15;
      return mul_add(f16(dm[0]), static_cast<float>(level), f16(dm[1]));
    }
    case WeightScheme::Int4: {
      const int64_t at = r * groups + g;
      const uint16_t s = reinterpret_cast<const uint16_t*>(m.scales)[at];
      const uint8_t level = (m.levels ? m.levels : m.scales + 2 * m.rows * groups)[at];
      const int u = (m.values[(r * m.cols + c) / 2] >> (4 * (c % 2))) & 15;
      const float w = static_cast<float>(u - (level & kInt4ZeroMask)) * ((level & kInt4F16Scale) ? f16(s) : bf16(s));  // exact
      return (level & kInt4F16Scale) ? round_f16(w) : round_bf16(w);
    }
    case WeightScheme::Mxfp4:
      return e2m1(static_cast<uint8_t>((m.values[(r * m.cols + c) / 2] >> (4 * (c % 2))) & 15)) * e8m0(m.scales[r * groups + g]);
    default: {  // fp8-block
      const auto* sc = reinterpret_cast<const float*>(m.scales);
      const int64_t scols = (m.cols + kFp8Block - 1) / kFp8Block;
      return e4m3(m.values[r * m.cols + c]) * sc[(r / kFp8Block) * scols + c / kFp8Block];
    }
  }
}

}  // namespace moerun::dequant

// MXFP4 and fp8-block (e4m3 with 128x128 scales): conversions and (de)quantization.
#include "base/native_quant.hpp"

#include "base/weight_dequant.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace moerun {
namespace {

// |v| (already divided by the block's scale, <= 6) to the nearest E2M1 magnitude code 0..7; a tie
// between two codes goes to the even one.
uint8_t e2m1_code(float a) {
  static constexpr float kMid[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  uint8_t k = 0;
  while (k < 7 && a > kMid[k]) ++k;
  if (k < 7 && a == kMid[k] && (k & 1)) ++k;  // a tie: k is odd, the even neighbour is k + 1
  return k;
}

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = [] {
    std::array<float, 256> v{};
    for (int b = 0; b < 256; ++b) v[static_cast<std::size_t>(b)] = dequant::e4m3(static_cast<uint8_t>(b));
    return v;
  }();
  return t;
}

}  // namespace

float e4m3_to_f32(uint8_t v) {
  return e4m3_table()[v];
}

uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  if (a < 0.015625f)
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.0f));  // subnormal steps of 2^-9 (8 -> 0x08, the least normal)
  int e2 = 0;
  const float m = std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1)
  const int e = e2 - 1;  // a = (2m) * 2^e, 2m in [1, 2)
  const int frac = static_cast<int>(std::nearbyint((2.0f * m - 1.0f) * 8.0f));  // exact: a power-of-two scaling
  const int bits = ((e + 7) << 3) + frac;  // frac 8 carries into the exponent, as it should
  return sign | static_cast<uint8_t>(std::min(bits, 0x7e));
}

void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups, float* out) {
  const dequant::QuantMatrix m{WeightScheme::Mxfp4, blocks, scales, rows, groups * kMxfp4Block};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) out[r * m.cols + c] = dequant::weight(m, r, c);
}

void quantize_mxfp4(const float* x, int64_t rows, int64_t groups, uint8_t* blocks, uint8_t* scales) {
  for (int64_t g = 0; g < rows * groups; ++g) {
    const float* xg = x + g * kMxfp4Block;
    float amax = 0.0f;
    for (int64_t i = 0; i < kMxfp4Block; ++i) amax = std::max(amax, std::fabs(xg[i]));
    int e = 0;
    if (amax > 0.0f) {
      int e2 = 0;
      std::frexp(amax, &e2);
      e = e2 - 1 - 2;  // floor(log2 amax) - 2: then amax / 2^e is in [4, 8)
      if (amax > std::ldexp(6.0f, e)) ++e;
      e = std::clamp(e, -127, 127);
    }
    scales[g] = static_cast<uint8_t>(e + 127);
    uint8_t* b = blocks + g * kMxfp4BlockBytes;
    for (int64_t i = 0; i < kMxfp4BlockBytes; ++i) {
      uint8_t nib[2];
      for (int h = 0; h < 2; ++h) {
        const float v = std::ldexp(xg[2 * i + h], -e);
        nib[h] = static_cast<uint8_t>(e2m1_code(std::min(std::fabs(v), 6.0f)) | (std::signbit(v) ? 8 : 0));
      }
      b[i] = static_cast<uint8_t>(nib[0] | (nib[1] << 4));
    }
  }
}

void dequantize_fp8_block(const uint8_t* q, const float* scales, int64_t cols, int64_t r0, int64_t r1, float* out) {
  // Rows [r0, r1) of a matrix of at least r1 rows: its scale rows up to r1's are all the view needs.
  const dequant::QuantMatrix m{WeightScheme::Fp8Block, q, reinterpret_cast<const uint8_t*>(scales), r1, cols};
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = 0; c < cols; ++c) out[(r - r0) * cols + c] = dequant::weight(m, r, c);
}

void quantize_fp8_block(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* scales) {
  const int64_t scols = fp8_scale_cols(cols);
  for (int64_t br = 0; br < fp8_scale_rows(rows); ++br)
    for (int64_t bc = 0; bc < scols; ++bc) {
      const int64_t r1 = std::min(rows, (br + 1) * kFp8Block), c1 = std::min(cols, (bc + 1) * kFp8Block);
      float amax = 0.0f;
      for (int64_t r = br * kFp8Block; r < r1; ++r)
        for (int64_t c = bc * kFp8Block; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
      scales[br * scols + bc] = s;
      for (int64_t r = br * kFp8Block; r < r1; ++r)
        for (int64_t c = bc * kFp8Block; c < c1; ++c) q[r * cols + c] = f32_to_e4m3(x[r * cols + c] / s);
    }
}

}  // namespace moerun

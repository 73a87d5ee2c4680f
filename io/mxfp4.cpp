// MXFP4 dequantization.
#include "io/mxfp4.hpp"

#include <cmath>

namespace moerun::io {

void dequantize_mxfp4(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t groups, float* out) {
  static constexpr float kE2M1[16] = {+0.0f, +0.5f, +1.0f, +1.5f, +2.0f, +3.0f, +4.0f, +6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int exponent = static_cast<int>(scales[r * groups + g]) - 127;
      const uint8_t* b = blocks + (r * groups + g) * kMxfp4BlockBytes;
      float* o = out + r * groups * kMxfp4Block + g * kMxfp4Block;
      for (int64_t i = 0; i < kMxfp4BlockBytes; ++i) {
        o[2 * i] = std::ldexp(kE2M1[b[i] & 15], exponent);
        o[2 * i + 1] = std::ldexp(kE2M1[b[i] >> 4], exponent);
      }
    }
}

}  // namespace moerun::io

// NaN/Inf scans of activations: an exponent of all ones, tested on the float's bits.
#include "runtime/nonfinite_rows.hpp"

#include <cstring>

namespace moerun::runtime {

bool all_finite(const float* x, int64_t n) {
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof bits);
    // (exponent bits) + one exponent step reaches bit 31 only from an all-ones exponent.
    bad |= ((bits & 0x7f800000u) + 0x00800000u) >> 31;
  }
  return bad == 0;
}

void flag_nonfinite_rows(const float* x, int64_t rows, int64_t cols, int32_t mark, int32_t* flag) {
  for (int64_t r = 0; r < rows; ++r)
    if (flag[r] < 0 && !all_finite(x + r * cols, cols)) flag[r] = mark;
}

}  // namespace moerun::runtime

// Bulk dtype conversions (vectorised by the compiler; used on activations before bf16 GEMMs).
#include "base/dtype.hpp"

namespace moerun {

void f32_to_bf16(const float* src, uint16_t* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void bf16_to_f32(const uint16_t* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

}  // namespace moerun

// Element types of weights and the bfloat16 conversions (round-to-nearest-even, as PyTorch does).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace moerun {

enum class DType { F32, BF16 };

inline std::size_t dtype_size(DType t) {
  return t == DType::F32 ? 4 : 2;
}
inline const char* dtype_name(DType t) {
  return t == DType::F32 ? "float32" : "bfloat16";
}

inline float bf16_to_f32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return 0x7fc0;  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// IEEE half precision (the scales of the quantized formats), round-to-nearest-even, as numpy does.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

void f32_to_bf16(const float* src, uint16_t* dst, std::size_t n);
void bf16_to_f32(const uint16_t* src, float* dst, std::size_t n);

}  // namespace moerun

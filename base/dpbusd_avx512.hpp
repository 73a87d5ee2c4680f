// vpdpbusd with its signed operand one 32-bit word from memory broadcast to all 16 lanes, for the
// int8 kernels (q8/q4, mxfp4). Include only from translation units that check for AVX-512 VNNI
// before calling it.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace moerun {

// acc += Σ u8 · s8 per 32-bit lane, the s8 four bytes at `s8x4` in every lane. Written as the
// instruction's embedded broadcast ({1to16}): GCC 12 keeps _mm512_set1_epi32 as a vpbroadcastd of
// its own, one more zmm instruction per product (a third of a decode pass's instructions).
__attribute__((target("avx512f,avx512vnni"))) inline __m512i dpbusd_bcast(__m512i acc, __m512i u8, const void* s8x4) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u8), "m"(*static_cast<const int32_t*>(s8x4)));
  return acc;
}

}  // namespace moerun

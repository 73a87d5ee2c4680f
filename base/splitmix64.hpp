// splitmix64 (Steele, Lea, Flood 2014): one step of its stream as a pure function, the seeded
// 64-bit mix behind sampling, synthetic weights and MinHash. Portable: the same bits everywhere.
#pragma once
#include <cstdint>

namespace moerun {

inline constexpr uint64_t kSplitmix64Gamma = 0x9e3779b97f4a7c15ull;

// The output for state x (the stream's next value is splitmix64(x), then x += kSplitmix64Gamma).
inline uint64_t splitmix64(uint64_t x) {
  x += kSplitmix64Gamma;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace moerun

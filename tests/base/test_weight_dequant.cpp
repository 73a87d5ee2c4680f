// base/weight_dequant.hpp, the element functions the CUDA backend's dequantize kernel runs on the
// GPU, run here on the CPU (the GPU's stand-in: the same code, compiled for the host) against
// references computed independently, from each format's definition: every code and scale of each
// element type, and whole matrices of each scheme at odd shapes.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/weight_dequant.hpp"

namespace moerun::dequant {
namespace {

__attribute__((target("f16c"))) float hw_f16(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) float hw_round_f16(float f) {
  return _cvtsh_ss(static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)));
}
// Round to nearest even bfloat16 by the integer trick, in the test's own words.
float round_to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&f, &b, 4);
  return f;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

TEST(WeightDequant, ElementTypesWidenToTheirDefinitions) {
  if (__builtin_cpu_supports("f16c"))
    for (uint32_t h = 0; h < 65536; ++h) ASSERT_TRUE(same_bits(f16(static_cast<uint16_t>(h)), hw_f16(static_cast<uint16_t>(h)))) << h;
  for (int b = 0; b < 256; ++b) {
    const int e = (b >> 3) & 15, m = b & 7;
    double want = e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    if (b & 0x80) want = -want;
    if (e == 15 && m == 7)
      EXPECT_TRUE(std::isnan(e4m3(static_cast<uint8_t>(b)))) << b;
    else
      EXPECT_TRUE(same_bits(e4m3(static_cast<uint8_t>(b)), static_cast<float>(want))) << b;
  }
  const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int n = 0; n < 16; ++n)
    EXPECT_TRUE(same_bits(e2m1(static_cast<uint8_t>(n)), static_cast<float>((n & 8 ? -1 : 1) * mag[n & 7]))) << n;
  for (int s = 0; s < 255; ++s) EXPECT_EQ(static_cast<double>(e8m0(static_cast<uint8_t>(s))), std::ldexp(1.0, s - 127)) << s;
  EXPECT_TRUE(std::isnan(e8m0(255)));
}

// A matrix of random stored bytes (scales drawn where they are finite) and its weights from the
// format's definition, in double, rounded as the format says.
struct Stored {
  std::vector<uint8_t> values, scales;
  std::vector<float> want;
};

Stored random_stored(WeightScheme s, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  Stored st;
  st.values.resize(static_cast<std::size_t>(values_bytes(s, rows, cols)));
  st.scales.resize(static_cast<std::size_t>(scales_bytes(s, rows, cols)));
  for (auto& v : st.values) v = static_cast<uint8_t>(rng());
  if (s == WeightScheme::Fp8Block)
    for (auto& v : st.values)
      if ((v & 0x7f) == 0x7f) v = 0;  // NaN codes are refused before any kernel sees them
  auto half = [&] { return static_cast<uint16_t>((rng() % 30 + 1) << 10 | (rng() & 0x83ff)); };  // finite, normal or not
  for (std::size_t i = 0; i + 1 < st.scales.size() && (s == WeightScheme::Q8 || s == WeightScheme::Q4); i += 2) {
    const uint16_t h = i % 14 == 0 ? static_cast<uint16_t>(rng() & 0x83ff) : half();  // some subnormal
    std::memcpy(&st.scales[i], &h, 2);
  }
  if (s == WeightScheme::Mxfp4)
    for (auto& v : st.scales) v = static_cast<uint8_t>(rng() % 255);
  const int64_t n_groups = rows * (cols / kGroup);
  if (s == WeightScheme::Int4)  // scales of either type (some large, some subnormal), any zero level
    for (int64_t i = 0; i < n_groups; ++i) {
      const bool f16_scale = rng() % 2;
      const uint16_t h = f16_scale ? (i % 9 == 0 ? static_cast<uint16_t>(rng() & 0x83ff) : half())
                                   : static_cast<uint16_t>(((rng() % 200 + 20) << 7) | (rng() & 0x807f));
      std::memcpy(&st.scales[2 * i], &h, 2);
      st.scales[static_cast<std::size_t>(2 * n_groups + i)] = static_cast<uint8_t>((rng() % 16) | (f16_scale ? 0x80 : 0));
    }
  if (s == WeightScheme::Fp8Block)
    for (std::size_t i = 0; i < st.scales.size(); i += 4) {
      const float f = std::ldexp(static_cast<float>(rng() % 1000 + 1) / 1000.0f, -static_cast<int>(rng() % 20));
      std::memcpy(&st.scales[i], &f, 4);
    }
  st.want.resize(static_cast<std::size_t>(rows * cols));
  const int64_t G = cols / kGroup;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double w = 0;
      auto scale16 = [&](int64_t i) {
        uint16_t h;
        std::memcpy(&h, &st.scales[2 * i], 2);
        return static_cast<double>(__builtin_cpu_supports("f16c") ? hw_f16(h) : f16(h));
      };
      auto nibble = [&] { return (st.values[(r * cols + c) / 2] >> (4 * (c % 2))) & 15; };
      switch (s) {
        case WeightScheme::Q8: w = static_cast<float>(scale16(r * G + c / 32) * static_cast<int8_t>(st.values[r * cols + c])); break;
        case WeightScheme::Q4:  // d * q rounded to float32, then + m rounded
          w = static_cast<float>(static_cast<float>(scale16(2 * (r * G + c / 32)) * nibble()) + scale16(2 * (r * G + c / 32) + 1));
          break;
        case WeightScheme::Int4: {  // (u - z) * s exact, rounded once to the scale's type (compressed-tensors' dequantize)
          const int64_t at = r * G + c / 32;
          const uint8_t lv = st.scales[static_cast<std::size_t>(2 * n_groups + at)];
          uint16_t h;
          std::memcpy(&h, &st.scales[2 * at], 2);
          uint32_t bits = static_cast<uint32_t>(h) << 16;
          float bf;
          std::memcpy(&bf, &bits, 4);
          const double p = (nibble() - (lv & 15)) * ((lv & 0x80) ? static_cast<double>(hw_f16(h)) : static_cast<double>(bf));
          w = (lv & 0x80) ? hw_round_f16(static_cast<float>(p)) : round_to_bf16(static_cast<float>(p));
          break;
        }
        case WeightScheme::Mxfp4: {
          const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
          const int n = nibble();
          w = (n & 8 ? -1 : 1) * mag[n & 7] * std::ldexp(1.0, st.scales[r * G + c / 32] - 127);
          break;
        }
        default: {
          float sc;
          std::memcpy(&sc, &st.scales[4 * ((r / 128) * ((cols + 127) / 128) + c / 128)], 4);
          const uint8_t b = st.values[r * cols + c];
          const int e = (b >> 3) & 15, m = b & 7;
          const double v = (b & 0x80 ? -1 : 1) * (e == 0 ? m * std::ldexp(1.0, -9) : (1 + m / 8.0) * std::ldexp(1.0, e - 7));
          w = static_cast<float>(v * sc);  // exact in double, one rounding to float32
        }
      }
      st.want[static_cast<std::size_t>(r * cols + c)] = static_cast<float>(w);
    }
  return st;
}

class WeightDequantMatrix : public ::testing::TestWithParam<WeightScheme> {};

TEST_P(WeightDequantMatrix, EveryWeightIsItsDefinitionBitForBit) {
  const WeightScheme s = GetParam();
  if (s == WeightScheme::Int4 && !__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU to round against";
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 32}, {7, 96}, {130, 288}, {257, 160}}) {
    const Stored st = random_stored(s, rows, cols, static_cast<uint32_t>(rows * 31 + cols));
    const QuantMatrix m{s, st.values.data(), st.scales.data(), rows, cols};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_TRUE(same_bits(weight(m, r, c), st.want[static_cast<std::size_t>(r * cols + c)]))
            << rows << "x" << cols << " at [" << r << "," << c << "]: " << weight(m, r, c) << " vs " << st.want[r * cols + c];
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, WeightDequantMatrix,
                         ::testing::Values(WeightScheme::Q8, WeightScheme::Q4, WeightScheme::Int4, WeightScheme::Mxfp4,
                                           WeightScheme::Fp8Block),
                         [](const auto& info) {
                           return std::string(info.param == WeightScheme::Q8      ? "q8"
                                              : info.param == WeightScheme::Q4    ? "q4"
                                              : info.param == WeightScheme::Int4  ? "int4"
                                              : info.param == WeightScheme::Mxfp4 ? "mxfp4"
                                                                                  : "fp8_block");
                         });

}  // namespace
}  // namespace moerun::dequant

// q8/q4/int4 group quantization and the quantized matmul, against fp64 references of the dequantized
// weights; fp16 conversions against the CPU's own F16C instructions.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.hpp"
#include "base/quant_format.hpp"
#include "base/quant_matmul.hpp"

namespace moerun {
namespace {

__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) {
  return _cvtsh_ss(h);
}

TEST(Fp16, EveryHalfWidensAsTheCpuDoes) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU to compare against";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = f16_to_f32(static_cast<uint16_t>(h)), b = hw_f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(b))
      EXPECT_TRUE(std::isnan(a)) << h;
    else
      ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << "half " << h << ": " << a << " vs " << b;
  }
}

TEST(Fp16, NarrowingRoundsToNearestEvenAsTheCpuDoes) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU to compare against";
  std::mt19937 rng(7);
  std::vector<float> xs{0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 2.98e-8f, 5.96e-8f, 6.1e-5f, INFINITY, -INFINITY};
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    xs.push_back(f);
    xs.push_back(std::ldexp(static_cast<float>(rng() % 100000) / 100000.0f, static_cast<int>(rng() % 50) - 30));
  }
  for (float f : xs) ASSERT_EQ(f32_to_f16(f), hw_f32_to_f16(f)) << f;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (float& x : v) x = nd(rng);
  // An outlier per few groups, as trained weights have.
  for (std::size_t i = 0; i < v.size(); i += 97) v[i] *= 6.0f;
  return v;
}

struct Stored {
  std::vector<uint8_t> q;
  std::vector<uint16_t> scales;
  std::vector<uint8_t> levels;  // int4
};
// int4 as quantize_rows writes it (bf16 scales, zero level 8), then with what checkpoints also ship
// mixed in: every third group's scale as fp16 (the same value), every fourth group's zero level
// another (an asymmetric scheme's).
Stored quantize(WeightScheme s, const std::vector<float>& w, int64_t rows, int64_t cols) {
  Stored st{std::vector<uint8_t>(static_cast<std::size_t>(rows * quant_row_bytes(s, cols))),
            std::vector<uint16_t>(static_cast<std::size_t>(rows * quant_row_scales(s, cols))),
            std::vector<uint8_t>(s == WeightScheme::Int4 ? static_cast<std::size_t>(rows * cols / 32) : 0)};
  quantize_rows(s, w.data(), rows, cols, st.q.data(), st.scales.data(), st.levels.data());
  for (std::size_t g = 0; g < st.levels.size(); ++g) {
    if (g % 3 == 1) {
      st.scales[g] = f32_to_f16(bf16_to_f32(st.scales[g]));
      st.levels[g] |= kInt4F16Scale;
    }
    if (g % 4 == 2) st.levels[g] = static_cast<uint8_t>((st.levels[g] & kInt4F16Scale) | (g * 7) % 16);
  }
  return st;
}
std::vector<float> dequantize(WeightScheme s, const Stored& st, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  dequantize_rows(s, st.q.data(), st.scales.data(), rows, cols, out.data(), st.levels.data());
  return out;
}
void pack(WeightScheme s, const Stored& st, int64_t N, int64_t K, AlignedBuffer& blocked) {
  blocked.resize(static_cast<std::size_t>(quant_blocked_bytes(s, N, K)));
  quant_pack(s, st.q.data(), st.scales.data(), N, K, blocked.as<uint8_t>(), st.levels.data());
}

TEST(QuantFormat, Q8ErrorIsAtMostHalfAStep) {
  const int64_t rows = 7, cols = 96;
  const auto w = random_matrix(rows, cols, 1);
  const Stored st = quantize(WeightScheme::Q8, w, rows, cols);
  const auto back = dequantize(WeightScheme::Q8, st, rows, cols);
  for (int64_t g = 0; g < rows * cols / 32; ++g) {
    float amax = 0;
    for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(w[g * 32 + k]));
    const float d = f16_to_f32(st.scales[g]);
    EXPECT_NEAR(d, amax / 127, amax / 127 * 1e-3) << "the fp16 scale of group " << g;
    for (int k = 0; k < 32; ++k) EXPECT_LE(std::fabs(w[g * 32 + k] - back[g * 32 + k]), d * 0.5f * 1.0001f + 1e-7f);
  }
}

TEST(QuantFormat, Q4LeastSquaresBeatsTheMinMaxGridAndIsDeterministic) {
  const int64_t rows = 16, cols = 256;
  const auto w = random_matrix(rows, cols, 2);
  const Stored st = quantize(WeightScheme::Q4, w, rows, cols);
  const auto back = dequantize(WeightScheme::Q4, st, rows, cols);
  double err = 0, grid_err = 0;
  for (int64_t g = 0; g < rows * cols / 32; ++g) {
    const float* x = w.data() + g * 32;
    const float mn = *std::min_element(x, x + 32), mx = *std::max_element(x, x + 32);
    const double d = (mx - mn) / 15.0;
    for (int k = 0; k < 32; ++k) {
      const double l = std::clamp(std::nearbyint((x[k] - mn) / d), 0.0, 15.0);
      grid_err += std::pow(x[k] - (mn + d * l), 2);
      err += std::pow(x[k] - back[g * 32 + k], 2);
      EXPECT_LE(std::fabs(x[k] - back[g * 32 + k]), d) << "group " << g;
    }
  }
  EXPECT_LT(err, 0.95 * grid_err) << "least squares should improve on min/max by more than fp16 noise";
  const Stored again = quantize(WeightScheme::Q4, w, rows, cols);
  EXPECT_EQ(again.q, st.q);
  EXPECT_EQ(again.scales, st.scales);
}

// The weight level q and its group's (d, m) (m = 0 for q8), from the stored form.
struct Level {
  double q, d, m;
};
Level level(WeightScheme s, const Stored& st, int64_t K, int64_t n, int64_t k) {
  const int64_t g = k / 32;
  if (s == WeightScheme::Q8)
    return {static_cast<double>(static_cast<int8_t>(st.q[n * K + k])), f16_to_f32(st.scales[n * (K / 32) + g]), 0.0};
  const uint8_t byte = st.q[n * K / 2 + k / 2];
  const double u = (byte >> (4 * (k % 2))) & 15;
  if (s == WeightScheme::Int4) {  // w = (u - z) s, the level u - z meeting the int8 activations
    const int64_t at = n * (K / 32) + g;
    const uint8_t lv = st.levels[at];
    const double d = (lv & 0x80) ? f16_to_f32(st.scales[at]) : bf16_to_f32(st.scales[at]);
    return {u - (lv & 15), d, 0.0};
  }
  return {u, f16_to_f32(st.scales[n * (K / 16) + 2 * g]), f16_to_f32(st.scales[n * (K / 16) + 2 * g + 1])};
}

// In fp64, what the kernel computes up to float rounding: Σ d q (dx qx) + m Σ x per group.
struct Expected {
  double y, mag, exact, bound;  // y; Σ|x w|; x·w with the real x; Σ|d q| dx / 2 (activation rounding)
};
Expected expected(WeightScheme s, const Stored& st, const QuantizedRows& x, const std::vector<float>& xf, int64_t m, int64_t n) {
  const int64_t K = x.cols;
  Expected e{0, 0, 0, 0};
  for (int64_t k = 0; k < K; ++k) {
    const Level l = level(s, st, K, n, k);
    const double dx = x.dx.as<float>()[m * (K / 32) + k / 32], xr = xf[m * K + k];
    e.y += l.d * l.q * dx * x.q.as<int8_t>()[m * K + k] + l.m * xr;
    e.mag += std::fabs(xr * (l.d * l.q + l.m));
    e.exact += xr * (l.d * l.q + l.m);
    e.bound += std::fabs(l.d * l.q) * dx * 0.5;
  }
  return e;
}

class QuantMatmul : public ::testing::TestWithParam<std::tuple<WeightScheme, int64_t, int64_t, int64_t>> {
 protected:
  // y from every kernel this CPU has, all bitwise equal to the portable loop's, and that within
  // float rounding of the fp64 expectation and within the activation-rounding bound of x·W.
  void check(WeightScheme s, int64_t M, int64_t N, int64_t K, std::initializer_list<QuantKernel> kernels) {
    const auto w = random_matrix(N, K, 3, 0.05f);
    const auto xf = random_matrix(M, K, 4);
    const Stored st = quantize(s, w, N, K);
    AlignedBuffer blocked;
    pack(s, st, N, K, blocked);
    QuantizedRows x;
    quantize_activations(xf.data(), M, K, x);
    std::vector<float> yp(static_cast<std::size_t>(M * N));
    quant_matmul(s, x, N, blocked.as<uint8_t>(), yp.data(), QuantKernel::Portable);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        const Expected e = expected(s, st, x, xf, m, n);
        const float v = yp[static_cast<std::size_t>(m * N + n)];
        ASSERT_NEAR(v, e.y, 2e-6 * e.mag + 1e-7) << "m " << m << " n " << n;
        ASSERT_LE(std::fabs(v - e.exact), e.bound * 1.001 + 2e-6 * e.mag + 1e-7) << "activation rounding bound, m " << m << " n " << n;
      }
    for (QuantKernel k : kernels) {
      if (!quant_kernel_supported(k)) {
        std::printf("  (no %s kernel on this CPU: not run)\n", quant_kernel_name(k));
        continue;
      }
      std::vector<float> y(yp.size(), -7.0f);
      quant_matmul(s, x, N, blocked.as<uint8_t>(), y.data(), k);
      for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], yp[i]) << quant_kernel_name(k) << " and portable differ at " << i;
    }
  }
};

TEST_P(QuantMatmul, DecodeRowsMatchFp64AndEveryKernelIsBitwiseEqual) {
  const auto [s, M, N, K] = GetParam();
  check(s, M, N, K, {QuantKernel::Vnni, QuantKernel::Amx});
}

TEST_P(QuantMatmul, PrefillRowsMatchFp64AndEveryKernelIsBitwiseEqual) {
  const auto [s, M, N, K] = GetParam();
  check(s, M * 7 + 11, N, K, {QuantKernel::Vnni, QuantKernel::Amx});  // 18 to 74 rows, none a multiple of 16
}

INSTANTIATE_TEST_SUITE_P(Shapes, QuantMatmul,
                         ::testing::Combine(::testing::Values(WeightScheme::Q8, WeightScheme::Q4, WeightScheme::Int4),
                                            ::testing::Values(1, 3, 4, 5, 9), ::testing::Values(1, 16, 17, 33, 100),
                                            ::testing::Values(32, 96, 1024)));

TEST(QuantizeActivations, PerGroupAmaxScaleAndNearestLevels) {
  const int64_t M = 3, K = 96;
  const auto x = random_matrix(M, K, 9);
  QuantizedRows q;
  quantize_activations(x.data(), M, K, q);
  // Zero rows up to 16 for the AMX kernel's tiles where it can run; elsewhere no padding at all (a
  // one-row GEMM zeroed 31 rows every call).
  const int64_t rows = quant_kernel_supported(QuantKernel::Amx) ? 16 : M;
  ASSERT_GE(q.q.size(), static_cast<std::size_t>(rows * K));
  for (int64_t i = M * K; i < rows * K; ++i) ASSERT_EQ(q.q.as<int8_t>()[i], 0) << "padding row byte " << i;
  for (int64_t g = 0; g < M * K / 32; ++g) {
    double amax = 0, sum = 0;
    for (int k = 0; k < 32; ++k) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[g * 32 + k])));
      sum += x[g * 32 + k];
    }
    EXPECT_EQ(q.dx.as<float>()[g], static_cast<float>(amax) / 127.0f);
    EXPECT_NEAR(q.xsum.as<float>()[g], sum, 1e-5 * amax * 32);
    int32_t qs = 0;
    for (int k = 0; k < 32; ++k) {
      const int v = q.q.as<int8_t>()[g * 32 + k];
      EXPECT_LE(std::fabs(x[g * 32 + k] / (amax / 127.0) - v), 0.5 + 1e-4) << "group " << g << " k " << k;
      qs += v;
    }
    EXPECT_EQ(q.qinit.as<int32_t>()[g], -128 * qs);
  }
}

// q4's blocked bytes against the layout written out element by element (base/quant_matmul.cpp):
// blocks of 16 rows, per group a chunk of 4 x 64 value bytes (byte 4 * lane + t of row j holds
// k = 4j + t in its low nibble and 16 + 4j + t in its high one) and then each lane's d, then m.
// 53 rows: three whole blocks (the AVX-512 path where the CPU has it) and a padded one.
TEST(QuantMatmul, Q4BlockedBytesFollowTheLayout) {
  const int64_t N = 53, K = 96, G = K / 32, row_bytes = K / 2, row_scales = 2 * G;
  const auto w = random_matrix(N, K, 9, 0.05f);
  const Stored st = quantize(WeightScheme::Q4, w, N, K);
  AlignedBuffer blocked(static_cast<std::size_t>(quant_blocked_bytes(WeightScheme::Q4, N, K)));
  quant_pack(WeightScheme::Q4, st.q.data(), st.scales.data(), N, K, blocked.as<uint8_t>());
  std::vector<uint8_t> want(blocked.size(), 0);
  auto level = [&](int64_t n, int64_t k) {
    const uint8_t byte = st.q[static_cast<std::size_t>(n * row_bytes + k / 2)];
    return k % 2 ? byte >> 4 : byte & 15;
  };
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      uint8_t* chunk = want.data() + ((n / 16) * G + g) * 320;
      const int64_t lane = n % 16;
      for (int64_t m = 0; m < 16; ++m)
        chunk[64 * (m / 4) + 4 * lane + m % 4] = static_cast<uint8_t>(level(n, g * 32 + m) | level(n, g * 32 + 16 + m) << 4);
      std::memcpy(chunk + 256 + 2 * lane, &st.scales[static_cast<std::size_t>(n * row_scales + 2 * g)], 2);
      std::memcpy(chunk + 288 + 2 * lane, &st.scales[static_cast<std::size_t>(n * row_scales + 2 * g + 1)], 2);
    }
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(blocked.as<uint8_t>()[i], want[i]) << "byte " << i;
}

// int4's blocked bytes: q4's values (the same nibbles, laid out as above), then each lane's 16-bit
// scale and its level byte: 304 bytes a chunk.
TEST(QuantMatmul, Int4BlockedBytesFollowTheLayout) {
  const int64_t N = 53, K = 96, G = K / 32;
  const auto w = random_matrix(N, K, 9, 0.05f);
  const Stored st = quantize(WeightScheme::Int4, w, N, K);
  AlignedBuffer blocked, q4_values;
  pack(WeightScheme::Int4, st, N, K, blocked);
  Stored as_q4 = st;
  as_q4.scales.assign(static_cast<std::size_t>(N * 2 * G), 0);
  pack(WeightScheme::Q4, as_q4, N, K, q4_values);
  ASSERT_EQ(blocked.size(), static_cast<std::size_t>(4 * G * 304));
  for (int64_t chunk = 0; chunk < 4 * G; ++chunk) {
    ASSERT_EQ(std::memcmp(blocked.as<uint8_t>() + chunk * 304, q4_values.as<uint8_t>() + chunk * 320, 256), 0) << "chunk " << chunk;
    for (int64_t lane = 0; lane < 16; ++lane) {
      const int64_t n = (chunk / G) * 16 + lane, g = chunk % G;
      uint16_t sc;
      std::memcpy(&sc, blocked.as<uint8_t>() + chunk * 304 + 256 + 2 * lane, 2);
      const uint8_t lv = blocked.as<uint8_t>()[chunk * 304 + 288 + lane];
      EXPECT_EQ(sc, n < N ? st.scales[static_cast<std::size_t>(n * G + g)] : 0) << n << " " << g;
      EXPECT_EQ(lv, n < N ? st.levels[static_cast<std::size_t>(n * G + g)] : 0) << n << " " << g;
    }
  }
}

TEST(QuantMatmul, ZeroActivationsGiveZero) {
  for (WeightScheme s : {WeightScheme::Q8, WeightScheme::Q4, WeightScheme::Int4}) {
    const auto w = random_matrix(20, 64, 5);
    const Stored st = quantize(s, w, 20, 64);
    AlignedBuffer blocked;
    pack(s, st, 20, 64, blocked);
    std::vector<float> xf(2 * 64, 0.0f), y(2 * 20, 1.0f);
    QuantizedRows x;
    quantize_activations(xf.data(), 2, 64, x);
    quant_matmul(s, x, 20, blocked.as<uint8_t>(), y.data());
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
}

}  // namespace
}  // namespace moerun

// MXFP4 and fp8-block: the element conversions against hand-derived values and double arithmetic,
// (de)quantization, and the native matmul against an fp64 reference of the dequantized weights,
// with odd shapes; the AVX-512 and portable kernels bitwise equal, and a row's result the same
// alone as in a batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/matmul.hpp"
#include "base/native_matmul.hpp"
#include "base/native_quant.hpp"

namespace moerun {
namespace {

// e4m3fn from its definition, in double: sign, 4 exponent bits (bias 7), 3 mantissa bits; e = 0 is
// subnormal (m * 2^-9); 0x7f / 0xff are NaN, and there is no infinity.
double e4m3_reference(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const double a = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (b & 0x80) ? -a : a;
}

TEST(Fp8, EveryCodeWidensToItsValue) {
  for (int b = 0; b < 256; ++b) {
    const double want = e4m3_reference(static_cast<uint8_t>(b));
    const float got = e4m3_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << b;
      EXPECT_TRUE(e4m3_is_nan(static_cast<uint8_t>(b)));
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << "code " << b;
      EXPECT_FALSE(e4m3_is_nan(static_cast<uint8_t>(b)));
    }
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);  // the largest
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // the least subnormal
}

TEST(Fp8, NarrowingRoundsToTheNearestCodeTiesToEven) {
  // Every finite code comes back as itself; between two neighbours, the nearer (the even code at a tie).
  std::vector<std::pair<double, int>> codes;
  for (int b = 0; b < 0x7f; ++b) codes.push_back({e4m3_reference(static_cast<uint8_t>(b)), b});
  for (const auto& [v, b] : codes) {
    EXPECT_EQ(f32_to_e4m3(static_cast<float>(v)), b) << v;
    if (v > 0) {
      EXPECT_EQ(f32_to_e4m3(static_cast<float>(-v)), b | 0x80) << -v;
    }
  }
  for (std::size_t i = 0; i + 1 < codes.size(); ++i) {
    const double lo = codes[i].first, hi = codes[i + 1].first, mid = (lo + hi) / 2;
    const int even = (codes[i].second % 2 == 0) ? codes[i].second : codes[i + 1].second;
    EXPECT_EQ(f32_to_e4m3(static_cast<float>(mid)), even) << "tie at " << mid;
    EXPECT_EQ(f32_to_e4m3(static_cast<float>(lo + (hi - lo) * 0.3)), codes[i].second);
    EXPECT_EQ(f32_to_e4m3(static_cast<float>(lo + (hi - lo) * 0.7)), codes[i + 1].second);
  }
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);  // saturates
  EXPECT_EQ(f32_to_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7f);
}

TEST(Mxfp4, DequantizesEveryCodeAndScale) {
  const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  std::vector<uint8_t> blocks(16 * 255), scales(255);
  for (int s = 0; s < 255; ++s) {
    scales[s] = static_cast<uint8_t>(s);
    for (int i = 0; i < 16; ++i) blocks[s * 16 + i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  }
  std::vector<float> out(32 * 255);
  dequantize_mxfp4(blocks.data(), scales.data(), 255, 1, out.data());
  for (int s = 0; s < 255; ++s)
    for (int i = 0; i < 16; ++i) {
      auto val = [&](int code) { return (code & 8 ? -1 : 1) * e2m1[code & 7] * std::ldexp(1.0, s - 127); };
      ASSERT_EQ(static_cast<double>(out[s * 32 + 2 * i]), static_cast<float>(val(i))) << s << " " << i;
      ASSERT_EQ(static_cast<double>(out[s * 32 + 2 * i + 1]), static_cast<float>(val(15 - i))) << s << " " << i;
    }
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (float& x : v) x = nd(rng);
  for (std::size_t i = 0; i < v.size(); i += 97) v[i] *= 6.0f;  // outliers, as trained weights have
  return v;
}

TEST(Mxfp4, QuantizingMxfp4ValuesGivesTheSameFloats) {
  const int64_t rows = 5, groups = 6;
  std::mt19937 rng(3);
  std::vector<uint8_t> blocks(rows * groups * 16), scales(rows * groups);
  for (auto& b : blocks) b = static_cast<uint8_t>(rng());
  for (auto& s : scales) s = static_cast<uint8_t>(100 + rng() % 50);
  std::vector<float> w(rows * groups * 32), back(w.size());
  dequantize_mxfp4(blocks.data(), scales.data(), rows, groups, w.data());
  std::vector<uint8_t> b2(blocks.size()), s2(scales.size());
  quantize_mxfp4(w.data(), rows, groups, b2.data(), s2.data());
  dequantize_mxfp4(b2.data(), s2.data(), rows, groups, back.data());
  for (std::size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w[i] == 0 ? 0.0f : w[i], back[i] == 0 ? 0.0f : back[i]) << i;
}

TEST(Mxfp4, QuantizationErrorIsAtMostHalfAStep) {
  const int64_t rows = 4, groups = 8;
  const auto w = random_matrix(rows, groups * 32, 5);
  std::vector<uint8_t> blocks(rows * groups * 16), scales(rows * groups);
  quantize_mxfp4(w.data(), rows, groups, blocks.data(), scales.data());
  std::vector<float> back(w.size());
  dequantize_mxfp4(blocks.data(), scales.data(), rows, groups, back.data());
  for (int64_t g = 0; g < rows * groups; ++g) {
    float amax = 0;
    for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(w[g * 32 + k]));
    const double step = std::ldexp(1.0, scales[g] - 127);  // E2M1's widest gap is 2 (4 -> 6) scale units
    EXPECT_LE(amax, 6 * step) << "the scale covers the block";
    EXPECT_GT(amax, 3 * step) << "and is the least that does";
    for (int k = 0; k < 32; ++k) EXPECT_LE(std::fabs(w[g * 32 + k] - back[g * 32 + k]), step * 1.0000001) << g << " " << k;
  }
}

TEST(Fp8Block, QuantizesPerBlockWithPartialEdges) {
  const int64_t rows = 130, cols = 200;  // 2 x 2 blocks, the last row block 2 rows, the last column block 72
  auto w = random_matrix(rows, cols, 9, 0.02f);
  for (int64_t c = 0; c < cols; ++c) w[129 * cols + c] *= 50;  // the last row block has another range
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> sc(fp8_scale_rows(rows) * fp8_scale_cols(cols));
  ASSERT_EQ(sc.size(), 4u);
  quantize_fp8_block(w.data(), rows, cols, q.data(), sc.data());
  std::vector<float> back(w.size());
  dequantize_fp8_block(q.data(), sc.data(), cols, 0, rows, back.data());
  for (int64_t br = 0; br < 2; ++br)
    for (int64_t bc = 0; bc < 2; ++bc) {
      float amax = 0;
      for (int64_t r = br * 128; r < std::min<int64_t>(rows, br * 128 + 128); ++r)
        for (int64_t c = bc * 128; c < std::min<int64_t>(cols, bc * 128 + 128); ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      EXPECT_FLOAT_EQ(sc[br * 2 + bc], amax / 448) << br << " " << bc;
    }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float s = sc[(r / 128) * 2 + c / 128];
      // e4m3 keeps 3 mantissa bits: half an ulp is 1/16 of the value's power of two; subnormals 2^-10.
      const double tol = std::max(std::fabs(w[r * cols + c]) / 16.0, std::ldexp(1.0, -10) * s) * 1.0001;
      ASSERT_LE(std::fabs(w[r * cols + c] - back[r * cols + c]), tol) << r << " " << c;
      ASSERT_EQ(back[r * cols + c], e4m3_to_f32(q[r * cols + c]) * s);  // one float32 product, as weight_dequant
    }
  // Rows r0..r1 alone are the same rows.
  std::vector<float> part(3 * cols);
  dequantize_fp8_block(q.data(), sc.data(), cols, 127, 130, part.data());
  EXPECT_EQ(0, std::memcmp(part.data(), back.data() + 127 * cols, part.size() * 4));
}

// A matrix in a native scheme: stored bytes, blocked form, and the dequantized float32 weights.
struct NativeMatrix {
  std::vector<uint8_t> values, blocked;
  std::vector<uint8_t> scales;  // bytes of E8M0 or float32 scales
  std::vector<float> dequantized;
};

NativeMatrix make_native(WeightScheme s, int64_t N, int64_t K, uint32_t seed) {
  NativeMatrix m;
  const auto w = random_matrix(N, K, seed, 0.05f);
  m.dequantized.resize(static_cast<std::size_t>(N * K));
  if (s == WeightScheme::Mxfp4) {
    m.values.resize(N * K / 2);
    m.scales.resize(N * K / 32);
    quantize_mxfp4(w.data(), N, K / 32, m.values.data(), m.scales.data());
    dequantize_mxfp4(m.values.data(), m.scales.data(), N, K / 32, m.dequantized.data());
  } else {
    m.values.resize(N * K);
    m.scales.resize(fp8_scale_rows(N) * fp8_scale_cols(K) * 4);
    auto* sc = reinterpret_cast<float*>(m.scales.data());
    quantize_fp8_block(w.data(), N, K, m.values.data(), sc);
    // Subnormal codes and both signs of zero are in there; make one block's scale a power of two
    // below 2^-120, where scale * 256 must still be exact.
    sc[0] = std::ldexp(1.0f, -121);
    dequantize_fp8_block(m.values.data(), sc, K, 0, N, m.dequantized.data());
  }
  m.blocked.resize(static_cast<std::size_t>(native_blocked_bytes(s, N, K)));
  native_pack(s, m.values.data(), m.scales.data(), N, K, m.blocked.data());
  return m;
}

std::vector<float> reference(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t K, int64_t N,
                             std::vector<double>* abs_sum) {
  std::vector<float> y(static_cast<std::size_t>(M * N));
  abs_sum->assign(y.size(), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        s += static_cast<double>(x[m * K + k]) * w[n * K + k];
        (*abs_sum)[m * N + n] += std::fabs(static_cast<double>(x[m * K + k]) * w[n * K + k]);
      }
      y[m * N + n] = static_cast<float>(s);
    }
  return y;
}

// mxfp4's bound on what representing x by its digits costs: Σ_k |w[k]| s_g 2^-15, s_g the least power
// of two with max|x| over the group <= 127 s_g.
std::vector<double> digit_error_bound(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t K, int64_t N) {
  std::vector<double> bound(static_cast<std::size_t>(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t g = 0; g < K / 32; ++g) {
      double amax = 0;
      for (int64_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(static_cast<double>(x[m * K + g * 32 + k])));
      double sg = std::ldexp(1.0, -160);
      while (amax > 127 * sg) sg *= 2;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < 32; ++k) bound[m * N + n] += std::fabs(static_cast<double>(w[n * K + g * 32 + k])) * sg * 0x1p-15;
    }
  return bound;
}

class NativeMatmul : public ::testing::TestWithParam<WeightScheme> {};

TEST_P(NativeMatmul, MatchesFp64OfTheDequantizedWeightsAtOddShapes) {
  const WeightScheme s = GetParam();
  for (auto [M, K, N] : {std::tuple{1, 32, 1}, {1, 64, 17}, {3, 96, 33}, {4, 256, 64}, {5, 160, 50}, {7, 416, 130}, {37, 288, 81}}) {
    const NativeMatrix w = make_native(s, N, K, static_cast<uint32_t>(M * 1000 + N));
    const auto x = random_matrix(M, K, 77);
    std::vector<double> abs_sum;
    const auto ref = reference(x, w.dequantized, M, K, N, &abs_sum);
    std::vector<float> y(static_cast<std::size_t>(M * N), NAN), yp(y.size(), NAN);
    native_matmul(s, x.data(), M, K, N, w.blocked.data(), yp.data(), NativeKernel::Portable);
    const auto digits = s == WeightScheme::Mxfp4 ? digit_error_bound(x, w.dequantized, M, K, N) : std::vector<double>(y.size(), 0.0);
    for (std::size_t i = 0; i < y.size(); ++i)
      // float32 sums of K products: a few ulps of Σ|x w| (the rounding bound, not a fitted tolerance);
      // mxfp4 adds its activations' digits: at most s 2^-15 off per x, s the group's power of two
      ASSERT_LE(std::fabs(yp[i] - ref[i]), 1e-6 * abs_sum[i] + digits[i] + 1e-30) << M << "x" << K << "x" << N << " at " << i;
    if (!native_kernel_supported(s, NativeKernel::Avx512)) continue;
    native_matmul(s, x.data(), M, K, N, w.blocked.data(), y.data(), NativeKernel::Avx512);
    ASSERT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * 4)) << "AVX-512 and portable differ at " << M << "x" << K << "x" << N;
  }
  if (!native_kernel_supported(s, NativeKernel::Avx512)) GTEST_SKIP() << "portable kernel checked; this CPU has no AVX-512 to compare";
}

TEST_P(NativeMatmul, ARowGivesTheSameBitsAloneAsInABatch) {
  const WeightScheme s = GetParam();
  const int64_t M = 23, K = 384, N = 200;
  // And across mxfp4's chunks of 256 rows (their activation digits are made a chunk at a time).
  {
    const int64_t Mb = 300, Kb = 64, Nb = 20;
    const NativeMatrix wb = make_native(s, Nb, Kb, 13);
    const auto xb = random_matrix(Mb, Kb, 14);
    std::vector<float> all(static_cast<std::size_t>(Mb * Nb)), one(static_cast<std::size_t>(Nb));
    native_matmul(s, xb.data(), Mb, Kb, Nb, wb.blocked.data(), all.data());
    for (int64_t m : {0, 255, 256, 299}) {
      native_matmul(s, xb.data() + m * Kb, 1, Kb, Nb, wb.blocked.data(), one.data());
      ASSERT_EQ(0, std::memcmp(one.data(), all.data() + m * Nb, Nb * 4)) << "row " << m << " of 300";
    }
  }
  const NativeMatrix w = make_native(s, N, K, 11);
  const auto x = random_matrix(M, K, 12);
  std::vector<float> all(static_cast<std::size_t>(M * N));
  native_matmul(s, x.data(), M, K, N, w.blocked.data(), all.data());
  for (int64_t m = 0; m < M; ++m) {
    std::vector<float> one(static_cast<std::size_t>(N));
    native_matmul(s, x.data() + m * K, 1, K, N, w.blocked.data(), one.data());
    ASSERT_EQ(0, std::memcmp(one.data(), all.data() + m * N, N * 4)) << "row " << m;
  }
}

// mxfp4's activation digits at their edges: x / s exactly halfway between integers (the second
// digit clamped at 127, the third at 127), groups whose values span 12 decades, a group of zeros,
// and subnormal x: within the digits' bound of fp64, and both kernels the same bits.
// Matmul::linear takes the native formats too (one linear over every weight format): the same bits
// as native_matmul itself, for both formats.
TEST(NativeMatmul, LinearRunsTheNativeKernels) {
  const int64_t M = 3, K = 256, N = 48;
  Matmul mm;
  for (WeightScheme s : {WeightScheme::Mxfp4, WeightScheme::Fp8Block}) {
    const NativeMatrix m = make_native(s, N, K, 11);
    WeightMatrix W;
    W.dtype = DType::F32;
    W.scheme = s;
    W.rows = N;
    W.cols = K;
    W.data.resize(m.blocked.size());
    std::memcpy(W.data.data(), m.blocked.data(), m.blocked.size());
    const auto x = random_matrix(M, K, 12, 1.0f);
    std::vector<float> a(static_cast<std::size_t>(M * N)), b(a.size());
    mm.linear(x.data(), M, W, a.data());
    native_matmul(s, x.data(), M, K, N, m.blocked.data(), b.data());
    EXPECT_EQ(a, b) << static_cast<int>(s);
    std::vector<double> sums;
    const std::vector<float> ref = reference(x, m.dequantized, M, K, N, &sums);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], ref[i], 1e-4 * (sums[i] + 1)) << i;
  }
}

TEST(NativeMatmulMxfp4, DigitsKeepTheirBoundAtTiesWideRangesAndZeros) {
  const int64_t M = 3, K = 128, N = 40;
  const NativeMatrix w = make_native(WeightScheme::Mxfp4, N, K, 21);
  std::vector<float> x(static_cast<std::size_t>(M * K));
  for (int64_t k = 0; k < K; ++k) {
    x[k] = k % 32 == 0 ? 127.0f : static_cast<float>(k % 7) - 2.5f;  // s = 1: every other value a tie
    x[K + k] = k % 32 == 5 ? 1e3f : std::ldexp(1.0f, -static_cast<int>(k % 40)) * (k % 2 ? -1.0f : 1.0f);
    x[2 * K + k] = k < 32 ? 0.0f : k < 64 ? std::ldexp(1.0f, -140) * static_cast<float>(k) : std::sin(static_cast<float>(k));
  }
  std::vector<double> abs_sum;
  const auto ref = reference(x, w.dequantized, M, K, N, &abs_sum);
  const auto bound = digit_error_bound(x, w.dequantized, M, K, N);
  std::vector<float> yp(static_cast<std::size_t>(M * N)), y(yp.size());
  native_matmul(WeightScheme::Mxfp4, x.data(), M, K, N, w.blocked.data(), yp.data(), NativeKernel::Portable);
  for (std::size_t i = 0; i < yp.size(); ++i) ASSERT_LE(std::fabs(yp[i] - ref[i]), 1e-6 * abs_sum[i] + bound[i] + 1e-38) << i;
  if (!native_kernel_supported(WeightScheme::Mxfp4, NativeKernel::Avx512))
    GTEST_SKIP() << "portable kernel checked; no AVX-512 VNNI/VBMI here";
  native_matmul(WeightScheme::Mxfp4, x.data(), M, K, N, w.blocked.data(), y.data(), NativeKernel::Avx512);
  EXPECT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * 4));
}

// A NaN or Inf activation makes its row's outputs NaN (as float32 sums would give NaN or Inf), and
// leaves the other rows alone.
TEST(NativeMatmulMxfp4, NonFiniteActivationsGiveNaNRowsOnly) {
  const int64_t M = 3, K = 64, N = 20;
  const NativeMatrix w = make_native(WeightScheme::Mxfp4, N, K, 22);
  auto x = random_matrix(M, K, 23);
  x[40] = NAN;
  x[2 * K + 3] = INFINITY;
  for (NativeKernel kernel : {NativeKernel::Portable, NativeKernel::Avx512}) {
    if (!native_kernel_supported(WeightScheme::Mxfp4, kernel)) continue;
    std::vector<float> y(static_cast<std::size_t>(M * N));
    native_matmul(WeightScheme::Mxfp4, x.data(), M, K, N, w.blocked.data(), y.data(), kernel);
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_TRUE(std::isnan(y[n])) << n;
      EXPECT_TRUE(std::isfinite(y[N + n])) << n;
      EXPECT_TRUE(std::isnan(y[2 * N + n])) << n;
    }
  }
}

TEST_P(NativeMatmul, FindsTheBadScaleOrValueInABlockedForm) {
  const WeightScheme s = GetParam();
  const int64_t N = 40, K = 288;
  NativeMatrix w = make_native(s, N, K, 13);
  const char* what = nullptr;
  EXPECT_EQ(native_blocked_find_bad(s, N, K, w.blocked.data(), &what), -1);
  if (s == WeightScheme::Mxfp4) {
    w.scales[33 * (K / 32) + 4] = 255;  // row 33, group 4
    native_pack(s, w.values.data(), w.scales.data(), N, K, w.blocked.data());
    EXPECT_EQ(native_blocked_find_bad(s, N, K, w.blocked.data(), &what), 33 * (K / 32) + 4);
    EXPECT_STREQ(what, "an E8M0 scale of 255 (NaN)");
  } else {
    w.values[21 * K + 200] = 0xff;
    native_pack(s, w.values.data(), w.scales.data(), N, K, w.blocked.data());
    EXPECT_EQ(native_blocked_find_bad(s, N, K, w.blocked.data(), &what), 21 * K + 200);
    EXPECT_STREQ(what, "an e4m3 NaN");
    w.values[21 * K + 200] = 0;
    reinterpret_cast<float*>(w.scales.data())[2] = INFINITY;
    native_pack(s, w.values.data(), w.scales.data(), N, K, w.blocked.data());
    EXPECT_EQ(native_blocked_find_bad(s, N, K, w.blocked.data(), &what), 2);
    reinterpret_cast<float*>(w.scales.data())[2] = 0x1p119f;
    native_pack(s, w.values.data(), w.scales.data(), N, K, w.blocked.data());
    EXPECT_EQ(native_blocked_find_bad(s, N, K, w.blocked.data(), &what), 2) << "2^119 would overflow a weight (and 2^64 its products)";
  }
}

TEST(NativeMatmulForm, BytesAreTheStoredBytesPlusPaddingRows) {
  // 48 rows (3 whole blocks) x 256: mxfp4 4.25 bits per weight; fp8 one byte plus the 1 x 2 scales.
  EXPECT_EQ(native_blocked_bytes(WeightScheme::Mxfp4, 48, 256), 48 * 256 / 2 + 48 * 256 / 32);
  EXPECT_EQ(native_blocked_bytes(WeightScheme::Fp8Block, 48, 256), 48 * 256 + 2 * 4);
  EXPECT_EQ(native_blocked_bytes(WeightScheme::Fp8Block, 49, 256), 64 * 256 + 2 * 4);  // a padded block
}

INSTANTIATE_TEST_SUITE_P(Schemes, NativeMatmul, ::testing::Values(WeightScheme::Mxfp4, WeightScheme::Fp8Block), [](const auto& info) {
  return info.param == WeightScheme::Mxfp4 ? std::string("mxfp4") : std::string("fp8_block");
});

}  // namespace
}  // namespace moerun

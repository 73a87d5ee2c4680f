// Matmul against an fp64 reference: fp32 and bf16 weights, plain and packed layouts, the fused
// epilogues, and row counts that hit oneDNN's slow M blockings (padded internally).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/amx_bf16_panel.hpp"
#include "base/matmul.hpp"
#include "base/quant_matmul.hpp"
#include "base/small_m_matmul.hpp"
#include "tests/test_support.hpp"

namespace moerun {
namespace {

using moerun::testing::make_weight;

std::vector<float> randv(std::size_t n, uint32_t seed) {
  return moerun::testing::random_normal(n, seed);
}

// y = x·Wᵀ in fp64, with inputs rounded to bf16 first when bf16.
std::vector<double> reference(const std::vector<float>& x, const std::vector<float>& w, int64_t M, int64_t K, int64_t N, bool bf16) {
  auto r = [&](float v) { return bf16 ? static_cast<double>(bf16_to_f32(f32_to_bf16(v))) : static_cast<double>(v); };
  std::vector<double> y(static_cast<std::size_t>(M * N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += r(x[m * K + k]) * r(w[n * K + k]);
      y[m * N + n] = s;
    }
  return y;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  EXPECT_LE(worst / scale, tol);
}

class MatmulTest : public ::testing::TestWithParam<std::tuple<DType, bool, int64_t>> {};

TEST_P(MatmulTest, LinearMatchesFp64) {
  const auto [dt, packed, M] = GetParam();
  const int64_t K = 96, N = 80;
  auto x = randv(static_cast<std::size_t>(M * K), 1), w = randv(static_cast<std::size_t>(N * K), 2);
  Matmul mm;
  WeightMatrix W = make_weight(w, N, K, dt);
  if (packed) mm.pack(W, 64);
  std::vector<float> y(static_cast<std::size_t>(M * N));
  mm.linear(x.data(), M, W, y.data());
  // bf16 products are exact in fp32; only fp32 accumulation order differs.
  expect_close(y, reference(x, w, M, K, N, dt == DType::BF16), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16), ::testing::Bool(),
                                            ::testing::Values<int64_t>(1, 7, 53, 244, 600)));

// Matmul::quantize (--quantize-dense): linear() on the quantized matrix gives exactly quant_matmul's
// bits on quantize_rows of the same weights (bf16 rounded to float32 first), pack() leaves it alone,
// and gemm() refuses it.
TEST(Matmul, QuantizedWeightsRunQuantMatmulBitForBit) {
  const int64_t M = 5, K = 96, N = 40;
  const auto x = randv(static_cast<std::size_t>(M * K), 3), w = randv(static_cast<std::size_t>(N * K), 4);
  for (DType dt : {DType::F32, DType::BF16})
    for (WeightScheme s : {WeightScheme::Q8, WeightScheme::Q4}) {
      Matmul mm;
      WeightMatrix W = make_weight(w, N, K, dt);
      std::vector<float> wf(w.size());
      if (dt == DType::BF16)
        bf16_to_f32(W.data.as<uint16_t>(), wf.data(), wf.size());
      else
        wf = w;
      mm.quantize(W, s);
      mm.pack(W, 32);
      EXPECT_EQ(W.scheme, s);
      std::vector<uint8_t> q(static_cast<std::size_t>(N * quant_row_bytes(s, K)));
      std::vector<uint16_t> sc(static_cast<std::size_t>(N * quant_row_scales(s, K)));
      quantize_rows(s, wf.data(), N, K, q.data(), sc.data());
      AlignedBuffer blocked(static_cast<std::size_t>(quant_blocked_bytes(s, N, K)));
      quant_pack(s, q.data(), sc.data(), N, K, blocked.as<uint8_t>());
      ASSERT_EQ(W.data.size(), blocked.size());
      EXPECT_EQ(0, std::memcmp(W.data.data(), blocked.data(), blocked.size()));
      QuantizedRows xq;
      quantize_activations(x.data(), M, K, xq);
      std::vector<float> want(static_cast<std::size_t>(M * N)), got(want.size());
      quant_matmul(s, xq, N, blocked.as<uint8_t>(), want.data());
      mm.linear(x.data(), M, W, got.data());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << dtype_name(dt);
      // And close to the float64 product of the unquantized weights (int8 activations and q4 weights: ~1e-1 at worst).
      expect_close(got, reference(x, wf, M, K, N, false), s == WeightScheme::Q8 ? 2e-2 : 1.5e-1);
      EXPECT_NE(moerun::testing::error_of([&] { mm.gemm(x.data(), M, W, got.data(), DType::F32); }, ErrorKind::Internal), "");
    }
}

TEST(Matmul, PaddedRowsAreGoodBlockings) {
  EXPECT_EQ(Matmul::padded_rows(1), 1);
  EXPECT_EQ(Matmul::padded_rows(16), 16);
  EXPECT_EQ(Matmul::padded_rows(17), 32);
  EXPECT_EQ(Matmul::padded_rows(244), 256);
  EXPECT_EQ(Matmul::padded_rows(464), 480);
  EXPECT_EQ(Matmul::padded_rows(512), 512);
  EXPECT_EQ(Matmul::padded_rows(600), 512 + 96);
}

TEST(Matmul, SiluAndMulEpilogues) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t M = 37, K = 64, N = 48;
    auto x = randv(static_cast<std::size_t>(M * K), 3), w1 = randv(static_cast<std::size_t>(N * K), 4),
         w3 = randv(static_cast<std::size_t>(N * K), 5);
    Matmul mm;
    WeightMatrix W1 = make_weight(w1, N, K, dt), W3 = make_weight(w3, N, K, dt);
    std::vector<uint16_t> xb(x.size());
    f32_to_bf16(x.data(), xb.data(), x.size());
    const void* xin = dt == DType::F32 ? static_cast<const void*>(x.data()) : xb.data();
    std::vector<float> g(static_cast<std::size_t>(M * N)), a(g.size());
    mm.gemm(xin, M, W1, g.data(), DType::F32, Epilogue::Silu);
    mm.gemm(xin, M, W3, a.data(), DType::F32, Epilogue::MulBy, g.data());
    auto r1 = reference(x, w1, M, K, N, dt == DType::BF16), r3 = reference(x, w3, M, K, N, dt == DType::BF16);
    std::vector<double> want(r1.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = r1[i] / (1 + std::exp(-r1[i])) * r3[i];
    expect_close(a, want, 1e-5);
  }
}

// The small-M kernels (M <= 4 in one pass, 5-8 in two where the CPU has no AMX; never bf16 where it
// has: there the panel's AMX tiles take every M) and the panel kernel (every other M), on the
// blocked layouts pack() picks for them, against fp64: the model's own shapes, and K and N that are
// not multiples of the 16/32 x 64 blocks (padding in the layout), with both epilogues and a bf16 output; M = 17 and 64 leave a partial
// 6-row panel and an odd count of blocks. Skipped with the reason where the CPU lacks AVX-512 (BF16).
TEST(Matmul, SmallMKernelsMatchFp64) {
  struct Shape {
    int64_t K, N;
  };
  int checked = 0, panels = 0;
  for (DType dt : {DType::F32, DType::BF16})
    for (Shape s : {Shape{1024, 3584}, Shape{3584, 1024}, Shape{1024, 384}, Shape{100, 70}, Shape{33, 130}, Shape{64, 64}})
      for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 16, 17, 64}) {
        auto x = randv(static_cast<std::size_t>(M * s.K), 10 + static_cast<uint32_t>(M)),
             w = randv(static_cast<std::size_t>(s.N * s.K), 20), w3 = randv(static_cast<std::size_t>(s.N * s.K), 21);
        Matmul mm;
        WeightMatrix W = make_weight(w, s.N, s.K, dt), W3 = make_weight(w3, s.N, s.K, dt);
        mm.pack(W, 32);
        mm.pack(W3, 32);
        if (!Matmul::uses_hand_kernels(W)) continue;  // this CPU has not the ISA
        ++checked;
        panels += Matmul::uses_panel(W, M);
        std::vector<float> y(static_cast<std::size_t>(M * s.N));
        mm.linear(x.data(), M, W, y.data());
        const auto ref = reference(x, w, M, s.K, s.N, dt == DType::BF16);
        expect_close(y, ref, 1e-5);
        std::vector<uint16_t> xb(x.size());
        f32_to_bf16(x.data(), xb.data(), x.size());
        const void* xin = dt == DType::F32 ? static_cast<const void*>(x.data()) : xb.data();
        std::vector<float> g(y.size());
        mm.gemm(xin, M, W, g.data(), DType::F32, Epilogue::Silu);
        std::vector<double> silu(ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i) silu[i] = ref[i] / (1 + std::exp(-ref[i]));
        expect_close(g, silu, dt == DType::F32 ? 1e-5 : 1e-2);
        std::vector<uint16_t> a(y.size());
        mm.gemm(xin, M, W3, a.data(), DType::BF16, Epilogue::MulBy, g.data());
        const auto ref3 = reference(x, w3, M, s.K, s.N, dt == DType::BF16);
        std::vector<float> got(a.size());
        std::vector<double> want(a.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
          got[i] = bf16_to_f32(a[i]);
          want[i] = ref[i] / (1 + std::exp(-ref[i])) * ref3[i];
        }
        expect_close(got, want, 1e-2);  // the output is rounded to bf16
      }
  if (checked == 0) GTEST_SKIP() << "this CPU has no AVX-512: the small-M kernels are not used here";
  EXPECT_GE(checked, 60);  // every shape and M of f32 at least
  EXPECT_GE(panels, 18);  // f32 panels on every shape at least
}

// The panel kernel's SiLU (its own vector exp) over the whole range of pre-activations, exp's
// under- and overflow included: a hand-made F32_16a64b block that copies x[m, n mod 16] to y[m, n].
TEST(Matmul, PanelSiluMatchesFp64AcrossRange) {
  if (!panel_supported(BlockedLayout::F32_16a64b)) GTEST_SKIP() << "this CPU has no AVX-512: no panel kernel";
  const int64_t M = 20, K = 16, N = 64;
  std::vector<float> w(static_cast<std::size_t>(K * N), 0.0f), x(static_cast<std::size_t>(M * K)), y(static_cast<std::size_t>(M * N));
  for (int64_t n = 0; n < N; ++n) w[static_cast<std::size_t>((n % 16) * N + n)] = 1.0f;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -120.0f + 240.0f * static_cast<float>(i) / static_cast<float>(x.size() - 1);
  PanelEpilogue ep;
  ep.silu = true;
  panel_matmul(BlockedLayout::F32_16a64b, x.data(), M, K, N, w.data(), y.data(), ep);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const double v = x[static_cast<std::size_t>(m * K + n % 16)], want = v / (1 + std::exp(-v));
      const float got = y[static_cast<std::size_t>(m * N + n)];
      EXPECT_NEAR(got, want, 2e-6 * std::max(1.0, std::abs(want))) << "at x = " << v;
    }
}

// Batch invariance (issue 44): a row's result is the same bits whatever M and the other rows, for
// every weight format and the fused epilogues: each row of an M-row GEMM against the row computed
// alone, and against the same rows in chunks of 7 (micro-batches, replicas). Where float32 or bf16
// run in oneDNN (no AVX-512F; no AVX512_BF16), which picks kernels by M, that dtype is skipped.
TEST(Matmul, RowsAreTheSameBitsWhateverTheBatch) {
  const int64_t K = 192, N = 200;
  const auto w = randv(static_cast<std::size_t>(N * K), 31), w3 = randv(static_cast<std::size_t>(N * K), 32);
  int checked = 0;
  for (WeightScheme s : {WeightScheme::Plain, WeightScheme::Q8, WeightScheme::Q4})
    for (DType dt : {DType::F32, DType::BF16}) {
      if (s != WeightScheme::Plain && dt == DType::F32) continue;
      Matmul mm;
      WeightMatrix W = make_weight(w, N, K, dt), W3 = make_weight(w3, N, K, dt);
      if (s == WeightScheme::Plain) {
        mm.pack(W, 32);
        mm.pack(W3, 32);
        if (!Matmul::rows_independent(dt)) continue;
      } else {
        mm.quantize(W, s);
      }
      for (int64_t M : {2, 5, 8, 9, 17, 64, 65, 130, 515}) {
        const auto x = randv(static_cast<std::size_t>(M * K), 40 + static_cast<uint32_t>(M));
        std::vector<float> all(static_cast<std::size_t>(M * N)), one(static_cast<std::size_t>(N)), chunks(all.size());
        mm.linear(x.data(), M, W, all.data());
        for (int64_t m0 = 0; m0 < M; m0 += 7) mm.linear(x.data() + m0 * K, std::min<int64_t>(7, M - m0), W, chunks.data() + m0 * N);
        EXPECT_EQ(0, std::memcmp(all.data(), chunks.data(), all.size() * 4)) << "M " << M << " in chunks of 7";
        for (int64_t m : {int64_t{0}, M / 2, M - 1}) {
          mm.linear(x.data() + m * K, 1, W, one.data());
          EXPECT_EQ(0, std::memcmp(all.data() + m * N, one.data(), one.size() * 4)) << "M " << M << " row " << m;
        }
        if (s != WeightScheme::Plain) continue;
        // The SwiGLU epilogues, bf16 output included (gemm takes x in W's dtype).
        std::vector<uint16_t> xb(x.size());
        f32_to_bf16(x.data(), xb.data(), x.size());
        const void* xin = dt == DType::F32 ? static_cast<const void*>(x.data()) : xb.data();
        const std::size_t xrow = static_cast<std::size_t>(K) * (dt == DType::F32 ? 4 : 2);
        std::vector<float> g(all.size()), g1(one.size());
        std::vector<uint16_t> a(all.size()), a1(one.size());
        mm.gemm(xin, M, W, g.data(), DType::F32, Epilogue::Silu);
        mm.gemm(xin, M, W3, a.data(), DType::BF16, Epilogue::MulBy, g.data());
        const int64_t m = M - 1;
        const void* xm = static_cast<const char*>(xin) + xrow * static_cast<std::size_t>(m);
        mm.gemm(xm, 1, W, g1.data(), DType::F32, Epilogue::Silu);
        mm.gemm(xm, 1, W3, a1.data(), DType::BF16, Epilogue::MulBy, g1.data());
        EXPECT_EQ(0, std::memcmp(g.data() + m * N, g1.data(), g1.size() * 4)) << "silu, M " << M;
        EXPECT_EQ(0, std::memcmp(a.data() + m * N, a1.data(), a1.size() * 2)) << "mul, bf16 out, M " << M;
        ++checked;
      }
    }
  if (checked == 0) GTEST_SKIP() << "this CPU has no AVX-512: float32 and bf16 GEMMs run in oneDNN";
}

// On CPUs with AMX-BF16 every bf16 GEMM, one row included, runs in the panel's AMX tiles: their sums
// differ from the streaming kernels' vdpbf16ps in the last bit, so a mix would make a row's bits
// depend on M.
TEST(Matmul, Bf16OnAmxTakesEveryRowCountInTheAmxPanel) {
  if (!amx_bf16_panel_supported()) GTEST_SKIP() << "this CPU has no AMX-BF16 (or Linux refused the tile state)";
  if (Matmul::bf16_widened()) GTEST_SKIP() << "oneDNN has no bf16 matmul here (capped below AVX-512): bf16 is held as float32";
  const int64_t K = 96, N = 80;
  Matmul mm;
  WeightMatrix W = make_weight(randv(static_cast<std::size_t>(N * K), 5), N, K, DType::BF16);
  mm.pack(W, 32);
  ASSERT_TRUE(Matmul::uses_hand_kernels(W));
  EXPECT_TRUE(Matmul::rows_independent(DType::BF16));
  for (int64_t M : {1, 2, 4, 5, 8, 16, 17, 600}) {
    EXPECT_FALSE(Matmul::uses_small_m(W, M)) << "M " << M;
    EXPECT_TRUE(Matmul::uses_panel(W, M)) << "M " << M;
  }
}

TEST(Dtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between bf16 1.0 and 1.0078125: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // halfway above odd 0x3f81: up to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

}  // namespace
}  // namespace moerun

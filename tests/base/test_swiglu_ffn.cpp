// The SwiGLU FFN (base/swiglu_ffn) against an fp64 reference, float32 and bfloat16 weights, over row counts that
// exercise the padded bf16 path; and gpt-oss's biased, clamped form.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "experts/cpu/cpu_backend.hpp"
#include "base/swiglu_ffn.hpp"
#include "experts/cpu/expert_packing.hpp"
#include "io/expert_shards.hpp"
#include "tests/experts/expert_reference.hpp"
#include "tests/test_support.hpp"

namespace moerun {
namespace {

// The CPU expert backend runs this FFN too; part of this test checks it end to end.
using experts::CpuBackend;
using experts::DeviceKind;
using experts::ExpertRun;
using experts::pack_expert_from_raw;
using experts::replica_row_granule;
using experts::ResidentExpert;

std::vector<float> randv(std::size_t n, uint32_t seed, float scale) {
  return moerun::testing::random_normal(n, seed, scale);
}
constexpr auto make = moerun::testing::make_weight;

class ExpertFfn : public ::testing::TestWithParam<std::tuple<DType, int64_t>> {};

TEST_P(ExpertFfn, MatchesFp64Reference) {
  const auto [dt, rows] = GetParam();
  const int64_t d = 64, ff = 96;
  auto w1 = randv(ff * d, 1, 0.125f), w3 = randv(ff * d, 2, 0.125f), w2 = randv(d * ff, 3, 0.1f);
  auto x = randv(static_cast<std::size_t>(rows * d), 4, 1.0f);
  Matmul mm;
  FfnWeights w{make(w1, ff, d, dt), make(w3, ff, d, dt), make(w2, d, ff, dt), {}};
  pack_ffn(mm, w);
  FfnScratch s;
  std::vector<float> y(static_cast<std::size_t>(rows * d));
  swiglu_ffn_forward(mm, x.data(), rows, w, y.data(), s);
  const bool bf = dt == DType::BF16;
  auto r = [&](double v) { return bf ? static_cast<double>(bf16_to_f32(f32_to_bf16(static_cast<float>(v)))) : v; };
  double worst = 0, scale = 0;
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<double> a(ff);
    for (int64_t i = 0; i < ff; ++i) {
      double g = 0, u = 0;
      for (int64_t c = 0; c < d; ++c) {
        g += r(x[t * d + c]) * r(w1[i * d + c]);
        u += r(x[t * d + c]) * r(w3[i * d + c]);
      }
      a[i] = r(g / (1 + std::exp(-g)) * u);  // bf16 experts round the activation like the GEMM input
    }
    for (int64_t o = 0; o < d; ++o) {
      double want = 0;
      for (int64_t i = 0; i < ff; ++i) want += a[i] * r(w2[o * ff + i]);
      worst = std::max(worst, std::abs(y[t * d + o] - want));
      scale = std::max(scale, std::abs(want));
    }
  }
  // fp32: accumulation order only. bf16: the activation's bf16 rounding may land on the other side.
  EXPECT_LE(worst / scale, bf ? 1e-2 : 1e-5);
}

// gpt-oss's expert: biases on w1, w3, w2 and the clamped SwiGLU, against its definition in fp64
// (modeling_gpt_oss GptOssExperts), with inputs large enough that both clamps act.
TEST(ExpertFfnVariants, BiasedClampedSwiGluMatchesFp64Reference) {
  const int64_t d = 64, ff = 96;
  const float alpha = 1.702f, limit = 7.0f;
  auto w1 = randv(ff * d, 11, 0.125f), w3 = randv(ff * d, 12, 0.125f), w2 = randv(d * ff, 13, 0.1f);
  auto bias = randv(2 * ff + d, 14, 0.5f);
  for (int64_t rows : {1, 5, 53}) {
    auto x = randv(static_cast<std::size_t>(rows * d), 15, 4.0f);
    Matmul mm;
    FfnWeights w{make(w1, ff, d, DType::F32), make(w3, ff, d, DType::F32), make(w2, d, ff, DType::F32), {}};
    w.bias.resize(bias.size() * sizeof(float));
    std::copy(bias.begin(), bias.end(), w.bias.as<float>());
    pack_ffn(mm, w);
    FfnScratch s;
    std::vector<float> y(static_cast<std::size_t>(rows * d));
    swiglu_ffn_forward(mm, x.data(), rows, w, y.data(), s, {true, alpha, limit});
    double worst = 0, scale = 0;
    int64_t clamped_gate = 0, clamped_up = 0;
    for (int64_t t = 0; t < rows; ++t) {
      std::vector<double> a(ff);
      for (int64_t i = 0; i < ff; ++i) {
        double g = bias[i], u = bias[ff + i];
        for (int64_t c = 0; c < d; ++c) {
          g += static_cast<double>(x[t * d + c]) * w1[i * d + c];
          u += static_cast<double>(x[t * d + c]) * w3[i * d + c];
        }
        clamped_gate += g > limit;
        clamped_up += std::abs(u) > limit;
        g = std::min(g, static_cast<double>(limit));
        u = std::clamp(u, -static_cast<double>(limit), static_cast<double>(limit));
        a[i] = (u + 1) * g / (1 + std::exp(-alpha * g));
      }
      for (int64_t o = 0; o < d; ++o) {
        double want = bias[2 * ff + o];
        for (int64_t i = 0; i < ff; ++i) want += a[i] * w2[o * ff + i];
        worst = std::max(worst, std::abs(y[t * d + o] - want));
        scale = std::max(scale, std::abs(want));
      }
    }
    EXPECT_LE(worst / scale, 1e-5) << rows << " rows";
    if (rows == 53) {
      EXPECT_GT(clamped_gate, 0) << "the gate clamp is exercised";
      EXPECT_GT(clamped_up, 0) << "the up clamp is exercised";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, ExpertFfn,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16), ::testing::Values<int64_t>(1, 5, 53, 130)));

// The same runs through run() one by one and through run_all(): both outputs.
std::pair<std::vector<float>, std::vector<float>> run_one_by_one_and_all(CpuBackend& backend, const std::vector<float>& x, int64_t rows,
                                                                         const std::vector<ExpertRun>& runs) {
  std::vector<float> seq(x.size(), -1.0f), par(x.size(), -2.0f);
  backend.begin(x.data(), rows, seq.data());
  for (const ExpertRun& r : runs) backend.run(r);
  backend.finish();
  backend.begin(x.data(), rows, par.data());
  backend.run_all(runs);
  backend.finish();
  return {seq, par};
}

// A layer's decode-sized experts one per thread (CpuBackend::run_all) give run()'s bits, bf16 and
// f32, with rows 1 to 8 (one and two passes of the small-M kernels) and an expert of 12 rows that
// sends the layer back to run() one expert at a time.
TEST(CpuBackendRunAll, ExpertsInParallelGiveTheSequentialBits) {
  for (DType dt : {DType::F32, DType::BF16})
    for (int64_t big : {0, 12}) {
      model::ModelConfig c;
      c.hidden_size = 64;
      c.intermediate_size = 96;
      c.dtype = dt;
      Matmul mm;
      CpuBackend backend(c, mm);
      const int64_t d = c.hidden_size, E = 6;
      std::vector<std::unique_ptr<ResidentExpert>> experts;
      for (int64_t e = 0; e < E; ++e) {
        const auto raw = randv(static_cast<std::size_t>(c.params_per_expert()), 10 + static_cast<uint32_t>(e), 0.1f);
        std::vector<uint16_t> bits(raw.size());
        f32_to_bf16(raw.data(), bits.data(), raw.size());
        experts.push_back(backend.allocate_expert());
        backend.load_expert(dt == DType::F32 ? static_cast<const void*>(raw.data()) : bits.data(), *experts.back());
      }
      std::vector<ExpertRun> runs;
      int64_t offset = 0;
      for (int64_t e = 0; e < E; ++e) {
        const int64_t rows = e == 0 && big ? big : e + 1 + (e > 3 ? 2 : 0);  // 1, 2, 3, 4, 7, 8 (or 12 first)
        runs.push_back({experts[static_cast<std::size_t>(e)].get(), offset, rows});
        offset += rows;
      }
      const auto x = randv(static_cast<std::size_t>(offset * d), 5, 1.0f);
      const auto [seq, par] = run_one_by_one_and_all(backend, x, offset, runs);
      EXPECT_EQ(par, seq) << dtype_name(dt) << (big ? ", one expert of 12 rows" : "");
    }
}

// Quantized experts through the raw form the shards store, packed as the backend packs them,
// against fp64 of the dequantized weights with the real x: q8/q4 differ from it by the int8
// activations' rounding; mxfp4 and fp8-block compute in float32 and differ by its rounding only.
class QuantizedExpertFfn : public ::testing::TestWithParam<std::tuple<WeightScheme, int64_t>> {};

TEST_P(QuantizedExpertFfn, MatchesFp64OfDequantizedWeights) {
  const auto [scheme, rows] = GetParam();
  model::ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.dtype = DType::BF16;
  c.expert_format = {DType::BF16, scheme};
  const int64_t d = c.hidden_size, ff = c.intermediate_size;
  std::vector<float> dq[3];
  const AlignedBuffer raw = moerun::testing::quantized_expert(c, 21, dq);
  Matmul mm;
  FfnWeights fw;
  pack_expert_from_raw(mm, raw.data(), c, fw);
  EXPECT_EQ(fw.w1.scheme, scheme);
  auto x = randv(static_cast<std::size_t>(rows * d), 24, 1.0f);
  FfnScratch s;
  std::vector<float> y(static_cast<std::size_t>(rows * d));
  swiglu_ffn_forward(mm, x.data(), rows, fw, y.data(), s);
  double worst = 0, scale = 0;
  for (int64_t t = 0; t < rows; ++t) {
    const auto want = moerun::testing::ffn_reference({dq[0], dq[1], dq[2]}, x.data() + t * d, d, ff);
    for (int64_t o = 0; o < d; ++o) {
      worst = std::max(worst, std::abs(y[t * d + o] - want[o]));
      scale = std::max(scale, std::abs(want[o]));
    }
  }
  // int8 activations: half a step of amax/127 per group, times Σ|d q| (for q4 about twice Σ|w|, its
  // levels being offset by the minimum; int4's signed levels u - z as q8's). Native formats: float32
  // sums of 64-96 products.
  const double bound = scheme == WeightScheme::Q4 ? 4e-2 : is_group_quantized(scheme) ? 2e-2 : 2e-6;
  EXPECT_LE(worst / scale, bound) << "rows " << rows;
  EXPECT_GT(worst, 0.0) << "exactly equal would mean the reference is not independent of the rounding";
}

INSTANTIATE_TEST_SUITE_P(Rows, QuantizedExpertFfn,
                         ::testing::Combine(::testing::Values(WeightScheme::Q8, WeightScheme::Q4, WeightScheme::Int4, WeightScheme::Mxfp4,
                                                              WeightScheme::Fp8Block),
                                            ::testing::Values(1, 3, 8, 16, 53)));

// gpt-oss's experts kept in MXFP4 (and the same in fp8-block): biases and the clamped SwiGLU on the
// native kernels against fp64, and a layer's experts one per thread (run_all) give run()'s bits.
TEST(NativeExpertFfn, BiasedClampedExpertsMatchFp64AndRunAllGivesRunsBits) {
  for (WeightScheme scheme : {WeightScheme::Mxfp4, WeightScheme::Fp8Block}) {
    model::ModelConfig c;
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.dtype = DType::F32;
    c.expert_format = {DType::F32, scheme};
    c.expert_bias = true;
    c.expert_activation = model::ExpertActivation::ClampedSwiGlu;
    c.swiglu_limit = 1.5;  // low enough that both clamps act on these weights
    const int64_t d = c.hidden_size, ff = c.intermediate_size, E = 5;
    Matmul mm;
    CpuBackend backend(c, mm);
    std::vector<std::unique_ptr<ResidentExpert>> experts;
    std::vector<std::array<std::vector<float>, 4>> ref(E);  // dequantized w1, w3, w2 and the biases
    for (int64_t e = 0; e < E; ++e) {
      std::vector<float> dq[3];
      AlignedBuffer raw = moerun::testing::quantized_expert(c, 40 + 3 * static_cast<uint32_t>(e), dq);
      const auto bias = randv(2 * ff + d, 90 + static_cast<uint32_t>(e), 0.3f);
      std::memcpy(raw.as<uint8_t>() + io::expert_part(io::expert_raw_parts(c), "b1").offset, bias.data(), bias.size() * 4);
      ref[e] = {dq[0], dq[1], dq[2], bias};
      experts.push_back(backend.allocate_expert());
      backend.load_expert(raw.data(), *experts.back());
    }
    std::vector<ExpertRun> runs;
    int64_t offset = 0;
    for (int64_t e = 0; e < E; ++e) {
      runs.push_back({experts[static_cast<std::size_t>(e)].get(), offset, e + 1});
      offset += e + 1;
    }
    const auto x = randv(static_cast<std::size_t>(offset * d), 6, 1.0f);
    const auto [seq, par] = run_one_by_one_and_all(backend, x, offset, runs);
    EXPECT_EQ(par, seq) << "run_all, " << c.expert_format.name();
    double worst = 0, scale = 0;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t t = runs[e].offset; t < runs[e].offset + runs[e].rows; ++t) {
        const auto& [w1, w3, w2, b] = ref[e];
        const auto want =
            moerun::testing::ffn_reference({w1, w3, w2, b.data(), true, c.swiglu_alpha, c.swiglu_limit}, x.data() + t * d, d, ff);
        for (int64_t o = 0; o < d; ++o) {
          worst = std::max(worst, std::abs(seq[t * d + o] - want[o]));
          scale = std::max(scale, std::abs(want[o]));
        }
      }
    EXPECT_LE(worst / scale, 2e-6) << c.expert_format.name();
  }
}

// Replicas (experts/replica_split): an expert's rows split at multiples of replica_row_granule and
// computed part by part give the bits of computing them whole: every format at any row where the
// CPU runs the hand kernels (AVX-512), else bf16 through oneDNN in its 512-row chunks (parts of 512,
// 1024 and the tail) and float32 never split (granule 0), nor bf16 where it runs widened to float32
// (ONEDNN_MAX_CPU_ISA=AVX2 shows that case here: test_matmul_avx2); the CUDA backend is never split.
TEST(ReplicaGranule, PartsAtTheGranuleGiveTheWholeBits) {
  struct Case {
    DType dt;
    WeightScheme scheme;
    int64_t rows;
    std::vector<std::vector<int64_t>> cuts;  // part boundaries inside [0, rows)
  };
  const std::vector<Case> cases = {
      {DType::BF16, WeightScheme::Plain, 1100, {{512}, {1024}, {512, 1024}}},
      {DType::BF16, WeightScheme::Plain, 300, {{1}, {5, 37}, {200, 299}}},
      {DType::F32, WeightScheme::Plain, 300, {{1}, {5, 37}, {200, 299}}},
      {DType::BF16, WeightScheme::Q8, 300, {{1}, {5, 37}, {200, 299}}},
      {DType::BF16, WeightScheme::Q4, 300, {{1}, {5, 37}, {200, 299}}},
      {DType::BF16, WeightScheme::Mxfp4, 300, {{1}, {5, 37}, {200, 299}}},
      {DType::F32, WeightScheme::Fp8Block, 300, {{1}, {5, 37}, {200, 299}}},
  };
  for (const Case& k : cases) {
    model::ModelConfig c;
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.dtype = k.dt;
    c.expert_format = {k.dt, k.scheme};
    const int64_t granule = replica_row_granule(c, DeviceKind::Cpu);
    if (k.scheme == WeightScheme::Plain && !Matmul::rows_independent(k.dt)) {
      EXPECT_EQ(granule, k.dt == DType::BF16 && !Matmul::bf16_widened() ? Matmul::kRowChunk : 0) << c.expert_format.name();
      if (granule == 0 || k.rows < granule) continue;  // oneDNN, this CPU: at its chunks only
    } else {
      ASSERT_EQ(granule, 1) << c.expert_format.name();
    }
    AlignedBuffer raw;
    if (k.scheme == WeightScheme::Plain) {
      // The raw form is in the model's dtype: float32 experts are 4 bytes a weight.
      const auto w = randv(static_cast<std::size_t>(c.params_per_expert()), 31, 0.1f);
      raw = AlignedBuffer(w.size() * dtype_size(k.dt));
      if (k.dt == DType::F32)
        std::memcpy(raw.data(), w.data(), w.size() * sizeof(float));
      else
        f32_to_bf16(w.data(), raw.as<uint16_t>(), w.size());
    } else {
      std::vector<float> dq[3];
      raw = moerun::testing::quantized_expert(c, 33, dq);
    }
    Matmul mm;
    FfnWeights fw;
    pack_expert_from_raw(mm, raw.data(), c, fw);
    const int64_t d = c.hidden_size;
    const auto x = randv(static_cast<std::size_t>(k.rows * d), 34, 1.0f);
    FfnScratch s;
    std::vector<float> whole(static_cast<std::size_t>(k.rows * d));
    swiglu_ffn_forward(mm, x.data(), k.rows, fw, whole.data(), s);
    for (const auto& cuts : k.cuts) {
      std::vector<float> parts(whole.size());
      std::vector<int64_t> bounds{0};
      bounds.insert(bounds.end(), cuts.begin(), cuts.end());
      bounds.push_back(k.rows);
      if (std::any_of(bounds.begin(), bounds.end(), [&](int64_t b) { return b % granule != 0 && b != k.rows; })) continue;
      for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
        swiglu_ffn_forward(mm, x.data() + bounds[i] * d, bounds[i + 1] - bounds[i], fw, parts.data() + bounds[i] * d, s);
      }
      EXPECT_EQ(parts, whole) << c.expert_format.name() << ", " << cuts.size() + 1 << " parts, first cut at " << cuts[0];
    }
  }
  model::ModelConfig f32;
  f32.dtype = DType::F32;
  f32.expert_format = {DType::F32, WeightScheme::Plain};
  EXPECT_EQ(replica_row_granule(f32, DeviceKind::Cpu), Matmul::rows_independent(DType::F32) ? 1 : 0);
  f32.expert_format = {DType::BF16, WeightScheme::Plain};
  EXPECT_EQ(replica_row_granule(f32, DeviceKind::Cuda), 0);
}

}  // namespace
}  // namespace moerun

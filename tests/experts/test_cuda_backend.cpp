// The CUDA expert backend against the CPU backend and hand-checkable references: each kernel
// (bf16 rounding bit for bit, SiLU*mul against fp64, permute and combine bit for bit against
// router/dispatch_plan), grouped expert FFNs over several experts and row counts (fp32 and bf16),
// reloading a slot while the GEMM that read it may still be queued, and the expert cache on device
// memory (L1 slots, L2 in raw form). Needs a GPU: without one each test skips with that reason
// (ctest label gpu, shown as Skipped).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/cuda_check.hpp"
#include "base/cuda_device.hpp"
#include "base/cuda_handles.hpp"
#include "experts/cpu/cpu_backend.hpp"
#include "experts/cuda/cuda_backend.hpp"
#include "experts/cuda/cuda_kernels.cuh"
#include "experts/expert_cache.hpp"
#include "experts/resident_experts.hpp"
#include "router/dispatch_plan.hpp"
#include "tests/experts/expert_reference.hpp"
#include "tests/test_support.hpp"

namespace moerun::experts {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine: the CUDA backend cannot run here"

using moerun::testing::random_normal;

template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer& b, std::size_t n) {
  std::vector<T> v(n);
  CUDA_CHECK(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}
template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<std::size_t>(v.size() * sizeof(T), 1));
  CUDA_CHECK(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}

TEST(CudaKernels, Bf16RoundingMatchesTheCpuBitForBit) {
  SKIP_WITHOUT_GPU();
  std::vector<float> x = random_normal(100000, 1, 3.0f);
  for (float s : {0.0f, -0.0f, 1e-40f, 65504.0f, 3.4e38f, INFINITY, -INFINITY, NAN, 1.00390625f, 1.01171875f}) x.push_back(s);
  std::vector<uint16_t> want(x.size());
  f32_to_bf16(x.data(), want.data(), x.size());
  auto dx = to_device(x);
  cuda::DeviceBuffer dy(x.size() * 2);
  kernels::f32_to_bf16(dx.as<float>(), dy.as<uint16_t>(), static_cast<int64_t>(x.size()), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(to_host<uint16_t>(dy, x.size()), want);
}

TEST(CudaKernels, SiluMulMatchesFp64) {
  SKIP_WITHOUT_GPU();
  const std::size_t n = 50000;
  auto g = random_normal(n, 2, 4.0f), u = random_normal(n, 3, 1.0f);
  auto dg = to_device(g), du = to_device(u);
  cuda::DeviceBuffer a32(n * 4), a16(n * 2);
  kernels::silu_mul(dg.as<float>(), du.as<float>(), a32.get(), false, static_cast<int64_t>(n), nullptr);
  kernels::silu_mul(dg.as<float>(), du.as<float>(), a16.get(), true, static_cast<int64_t>(n), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto y32 = to_host<float>(a32, n);
  const auto y16 = to_host<uint16_t>(a16, n);
  for (std::size_t i = 0; i < n; ++i) {
    const double want = static_cast<double>(g[i]) / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
    ASSERT_NEAR(y32[i], want, 1e-5 * (1 + std::abs(want))) << i;
    ASSERT_NEAR(bf16_to_f32(y16[i]), want, 1e-2 * (1 + std::abs(want))) << i;
  }
}

// gpt-oss's activation with biases, against its definition in fp64 (and bf16 biases read as such).
TEST(CudaKernels, ClampedGatedActivationMatchesFp64) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 300, ff = 96;
  const std::size_t n = static_cast<std::size_t>(rows * ff);
  auto g = random_normal(n, 2, 6.0f), u = random_normal(n, 3, 6.0f);
  const auto b1 = random_normal(ff, 4), b3 = random_normal(ff, 5);
  auto dg = to_device(g), du = to_device(u), db1 = to_device(b1), db3 = to_device(b3);
  cuda::DeviceBuffer act(n * 4);
  kernels::GatedActivation a;
  a.b1 = db1.get();
  a.b3 = db3.get();
  a.clamped = true;
  kernels::gated_activation(dg.as<float>(), du.as<float>(), a, act.get(), false, rows, ff, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto y = to_host<float>(act, n);
  for (std::size_t i = 0; i < n; ++i) {
    const double gv = std::min(static_cast<double>(g[i]) + b1[i % ff], 7.0);
    const double uv = std::clamp(static_cast<double>(u[i]) + b3[i % ff], -7.0, 7.0);
    const double want = (uv + 1) * gv / (1 + std::exp(-1.702 * gv));
    ASSERT_NEAR(y[i], want, 1e-5 * (1 + std::abs(want))) << i;
  }
}

TEST(CudaKernels, PermuteAndCombineMatchDispatchPlanBitForBit) {
  SKIP_WITHOUT_GPU();
  const int64_t T = 37, k = 2, E = 5, d = 24;
  std::vector<int32_t> expert(static_cast<std::size_t>(T * k));
  for (int64_t i = 0; i < T * k; ++i) expert[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 3 + i / 5) % E);  // some dropped
  const router::DispatchPlan plan = router::DispatchPlan::build(expert.data(), T, k, E);
  const auto x = random_normal(static_cast<std::size_t>(T * d), 4);
  const auto weight = random_normal(static_cast<std::size_t>(T * k), 5);
  std::vector<float> gathered(static_cast<std::size_t>(plan.rows() * d)), out(static_cast<std::size_t>(T * d));
  router::permute_rows(x.data(), d, plan, gathered.data());
  router::combine_rows(gathered.data(), d, plan, weight.data(), out.data());
  auto dx = to_device(x), dtok = to_device(plan.row_token), dslot = to_device(plan.slot_row), dw = to_device(weight);
  cuda::DeviceBuffer dg(gathered.size() * 4), dout(out.size() * 4);
  kernels::permute_rows(dx.as<float>(), dtok.as<int32_t>(), plan.rows(), d, dg.as<float>(), nullptr);
  kernels::combine_rows(dg.as<float>(), dslot.as<int64_t>(), dw.as<float>(), T, k, d, dout.as<float>(), nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(to_host<float>(dg, gathered.size()), gathered);
  EXPECT_EQ(to_host<float>(dout, out.size()), out);
}

// Raw bytes (w1 ‖ w3 ‖ w2 as a shard stores them) of a random expert.
std::vector<char> raw_expert(const model::ModelConfig& c, uint32_t seed) {
  const int64_t n = c.intermediate_size * c.hidden_size;
  const std::size_t es = dtype_size(c.dtype);
  std::vector<char> raw(static_cast<std::size_t>(3 * n) * es);
  for (int m = 0; m < 3; ++m) {
    const auto v = random_normal(static_cast<std::size_t>(n), seed * 3 + m,
                                 1.0f / std::sqrt(static_cast<float>(m == 2 ? c.intermediate_size : c.hidden_size)));
    char* at = raw.data() + static_cast<std::size_t>(m * n) * es;
    if (c.dtype == DType::F32)
      std::memcpy(at, v.data(), v.size() * 4);
    else
      f32_to_bf16(v.data(), reinterpret_cast<uint16_t*>(at), v.size());
  }
  return raw;
}

// Runs experts over consecutive blocks of `rows[i]` rows on `b`.
std::vector<float> run_grouped(ExpertBackend& b, const std::vector<const ResidentExpert*>& experts, const std::vector<int64_t>& rows,
                               const std::vector<float>& x, int64_t d) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  std::vector<float> y(static_cast<std::size_t>(total * d), -1.0f);
  b.begin(x.data(), total, y.data());
  int64_t off = 0;
  for (std::size_t i = 0; i < experts.size(); ++i) {
    b.run({experts[i], off, rows[i]});
    off += rows[i];
  }
  b.finish();
  return y;
}

double worst_relative(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return worst / std::max(scale, 1e-30);
}

// Experts of [ff, d] in the test's dtype, with a CPU and a CUDA backend for them.
class CudaBackendLayer : public ::testing::TestWithParam<DType> {
 protected:
  void make(int64_t d, int64_t ff, int64_t experts) {
    c_.hidden_size = d;
    c_.intermediate_size = ff;
    c_.num_experts = experts;
    c_.dtype = GetParam();
    cpu_ = std::make_unique<CpuBackend>(c_, mm_);
    gpu_ = make_cuda_backend(c_, 0);
  }
  double tolerance() const { return c_.dtype == DType::F32 ? 1e-5 : 1e-2; }
  model::ModelConfig c_;
  Matmul mm_;
  std::unique_ptr<CpuBackend> cpu_;
  std::unique_ptr<ExpertBackend> gpu_;
};

TEST_P(CudaBackendLayer, GroupedExpertsMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  make(64, 96, 4);
  EXPECT_EQ(gpu_->weight_memory(), MemoryKind::Device);
  std::vector<std::unique_ptr<ResidentExpert>> ce, ge;
  for (uint32_t e = 0; e < 4; ++e) {
    const auto raw = raw_expert(c_, e + 1);
    ce.push_back(cpu_->allocate_expert());
    cpu_->load_expert(raw.data(), *ce.back());
    ge.push_back(gpu_->allocate_expert());
    gpu_->load_expert(raw.data(), *ge.back());
    EXPECT_GE(ge.back()->buffer().allocated, static_cast<std::size_t>(3 * 64 * 96) * dtype_size(c_.dtype));
    EXPECT_EQ(ge.back()->buffer().kind, MemoryKind::Device);
  }
  // Row counts that cross the CPU's padded bf16 path, an expert with no rows, one row.
  const std::vector<int64_t> rows{53, 0, 1, 130};
  const auto x = random_normal(184 * 64, 9);
  const auto want = run_grouped(*cpu_, {ce[0].get(), ce[1].get(), ce[2].get(), ce[3].get()}, rows, x, 64);
  const auto got = run_grouped(*gpu_, {ge[0].get(), ge[1].get(), ge[2].get(), ge[3].get()}, rows, x, 64);
  // fp32: summation order only. bf16: the activation's rounding to bf16 may land on the other side.
  EXPECT_LE(worst_relative(got, want), tolerance());
}

TEST_P(CudaBackendLayer, ReloadingASlotWaitsForTheComputeThatReadsIt) {
  SKIP_WITHOUT_GPU();
  make(256, 512, 2);
  const auto a = raw_expert(c_, 1), b = raw_expert(c_, 2);
  auto ca = cpu_->allocate_expert(), cb = cpu_->allocate_expert(), slot = gpu_->allocate_expert();
  cpu_->load_expert(a.data(), *ca);
  cpu_->load_expert(b.data(), *cb);
  const auto x = random_normal(2048 * 256, 3);
  std::vector<float> y(x.size());
  // Expert a's GEMMs are queued (not finished) when b's load into the same slot starts: the load
  // must wait for them, so the results are a's, and the next run sees b.
  gpu_->load_expert(a.data(), *slot);
  gpu_->begin(x.data(), 2048, y.data());
  gpu_->run({slot.get(), 0, 2048});
  gpu_->load_expert(b.data(), *slot);
  gpu_->finish();
  const double tol = tolerance();
  EXPECT_LE(worst_relative(y, run_grouped(*cpu_, {ca.get()}, {2048}, x, 256)), tol);
  EXPECT_LE(worst_relative(run_grouped(*gpu_, {slot.get()}, {2048}, x, 256), run_grouped(*cpu_, {cb.get()}, {2048}, x, 256)), tol);
}

// gpt-oss's experts: biases b1‖b3‖b2 after the matrices in the raw form, the clamped SwiGLU (a
// small limit, so the clamp acts), and biases with the plain SwiGLU.
TEST_P(CudaBackendLayer, BiasedAndClampedExpertsMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  for (int variant = 0; variant < 2; ++variant) {
    c_ = {};
    c_.expert_bias = true;
    c_.expert_activation = variant == 0 ? model::ExpertActivation::ClampedSwiGlu : model::ExpertActivation::SwiGlu;
    c_.swiglu_limit = 0.7;
    make(64, 96, 2);
    std::vector<char> raw = raw_expert(c_, 5);
    const auto bias = random_normal(static_cast<std::size_t>(c_.expert_bias_params()), 6, 0.3f);
    const std::size_t es = dtype_size(c_.dtype), at = raw.size();
    raw.resize(at + bias.size() * es);
    if (c_.dtype == DType::F32)
      std::memcpy(raw.data() + at, bias.data(), bias.size() * 4);
    else
      f32_to_bf16(bias.data(), reinterpret_cast<uint16_t*>(raw.data() + at), bias.size());
    auto ce = cpu_->allocate_expert(), ge = gpu_->allocate_expert();
    cpu_->load_expert(raw.data(), *ce);
    gpu_->load_expert(raw.data(), *ge);
    EXPECT_GE(ge->buffer().bytes, raw.size());
    const auto x = random_normal(77 * 64, 8);
    EXPECT_LE(worst_relative(run_grouped(*gpu_, {ge.get()}, {77}, x, 64), run_grouped(*cpu_, {ce.get()}, {77}, x, 64)), tolerance())
        << (variant == 0 ? "clamped" : "biased SwiGLU");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaBackendLayer, ::testing::Values(DType::F32, DType::BF16));

// Quantized experts on the GPU: the dequantize kernel gives base/weight_dequant's weights bit for bit
// (the code the CPU runs in test_weight_dequant), and the FFN, float32 GEMMs over those weights,
// matches fp64 of the dequantized weights (the CPU's q8/q4 int8-activation kernels would be ~1e-2
// off, so the reference is fp64, not the CPU backend), with biases and the clamped activation.
TEST(CudaQuantizedExperts, DequantizeBitForBitAndFfnMatchesFp64) {
  SKIP_WITHOUT_GPU();
  for (WeightScheme s : {WeightScheme::Q8, WeightScheme::Q4, WeightScheme::Int4, WeightScheme::Mxfp4, WeightScheme::Fp8Block}) {
    model::ModelConfig c;
    c.hidden_size = 160;  // two 128-blocks along d for fp8, the second partial
    c.intermediate_size = 96;
    c.dtype = DType::BF16;
    c.expert_format = {DType::BF16, s};
    const int64_t d = c.hidden_size, ff = c.intermediate_size, rows = 37;
    std::vector<float> dq[3];
    AlignedBuffer raw = moerun::testing::quantized_expert(c, 13, dq);
    // The kernel on w1 against the element function on the host.
    const auto parts = io::expert_raw_parts(c);
    const auto& v = io::expert_part(parts, "w1");
    const auto& sc = io::expert_part(parts, "w1_scales");
    auto dv = to_device(std::vector<uint8_t>(raw.as<uint8_t>() + v.offset, raw.as<uint8_t>() + v.offset + v.bytes));
    const auto sb = static_cast<std::size_t>(dequant::scales_bytes(s, ff, d));  // int4: its level bytes too, right after
    auto ds = to_device(std::vector<uint8_t>(raw.as<uint8_t>() + sc.offset, raw.as<uint8_t>() + sc.offset + sb));
    cuda::DeviceBuffer out(static_cast<std::size_t>(ff * d) * 4);
    kernels::dequantize({s, dv.as<uint8_t>(), ds.as<uint8_t>(), ff, d}, out.as<float>(), nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto got_w1 = to_host<float>(out, static_cast<std::size_t>(ff * d));
    EXPECT_EQ(0, std::memcmp(got_w1.data(), dq[0].data(), got_w1.size() * 4)) << c.expert_format.name() << ": dequantize kernel";
    // The FFN through the backend against fp64.
    auto gpu = make_cuda_backend(c, 0);
    EXPECT_EQ(gpu->weight_format(), c.expert_format);
    auto e = gpu->allocate_expert();
    EXPECT_EQ(e->buffer().bytes, io::expert_raw_bytes(c)) << "the device slot holds the stored bytes";
    gpu->load_expert(raw.data(), *e);
    const auto x = random_normal(static_cast<std::size_t>(rows * d), 14);
    const auto y = run_grouped(*gpu, {e.get()}, {rows}, x, d);
    std::vector<float> want(y.size());
    for (int64_t t = 0; t < rows; ++t) {
      const auto w = moerun::testing::ffn_reference({dq[0], dq[1], dq[2]}, x.data() + t * d, d, ff);
      for (int64_t o = 0; o < d; ++o) want[t * d + o] = static_cast<float>(w[o]);
    }
    EXPECT_LE(worst_relative(y, want), 1e-5) << c.expert_format.name();
  }
}

TEST(CudaExpertCache, DeviceSlotsAndRawL2GiveTheResidentCpuResults) {
  SKIP_WITHOUT_GPU();
  const auto dir = moerun::testing::scratch_dir("cuda-cache");
  convert::SynthConfig s = moerun::testing::tiny_synth_config(2);
  convert::write_synthetic_model((dir / "model").string(), s, true);
  const model::ModelConfig& c = s.model;
  const auto index = io::ExpertShardIndex::build((dir / "model").string(), c);
  auto all = [](int64_t, int64_t) { return true; };
  Matmul mm;
  CpuBackend cpu(c, mm);
  ResidentExperts resident(cpu, index, c, all);
  auto gpu = make_cuda_backend(c, 0);
  ExpertCacheConfig cc;
  cc.l1_bytes = 2 * gpu->expert_bytes();  // 2 of 8 experts: every layer evicts
  cc.l2_dir = (dir / "l2").string();
  cc.prefetch = PrefetchPolicy::Lru;
  cc.warmup = WarmupPolicy::None;
  const auto x = random_normal(static_cast<std::size_t>(12 * c.hidden_size), 7);
  for (int pass = 0; pass < 2; ++pass) {  // the second pass reads the raw form back from L2
    ExpertCache cache(cc, *gpu, index, all, nullptr);
    EXPECT_EQ(cache.slots(), 2);
    for (int64_t layer = 0; layer < c.num_layers; ++layer)
      for (int64_t e = 0; e < c.num_experts; ++e) {
        std::vector<int64_t> rows(static_cast<std::size_t>(c.num_experts), 0);
        rows[static_cast<std::size_t>(e)] = 12;
        cache.begin_layer(layer, rows);
        const auto got = run_grouped(*gpu, {&cache.acquire(layer, e)}, {12}, x, c.hidden_size);
        cache.release(layer, e);
        const auto want = run_grouped(cpu, {&resident.acquire(layer, e)}, {12}, x, c.hidden_size);
        EXPECT_LE(worst_relative(got, want), 1e-5) << "pass " << pass << " expert " << layer << "/" << e;
      }
    cache.drain();
    if (pass == 1) {
      EXPECT_GT(cache.counters().l2_hits, 0);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace moerun::experts

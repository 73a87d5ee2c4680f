// The C interface of backend libraries (experts/backend_abi.h), through the real dlopen path of
// --device cuda, with a test library that exports the CPU backend (abi_test_backend.cpp; the GPU
// library itself needs a GPU, see test_cuda_backend): every call crosses as plain C, results are
// the CPU backend's bit for bit, and an error inside the library comes back as moerun::Error of
// its kind with its message.
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/error.hpp"
#include "experts/backend.hpp"
#include "experts/cpu/cpu_backend.hpp"
#include "convert/synthetic_model.hpp"
#include "tests/experts/expert_reference.hpp"
#include "tests/test_support.hpp"

namespace moerun::experts {
namespace {

model::ModelConfig config() {
  model::ModelConfig c = moerun::testing::tiny_synth_config(1).model;
  c.expert_format = {c.dtype, WeightScheme::Plain};
  return c;
}

BackendSpec spec() {
  const char* lib = std::getenv("MOERUN_TEST_BACKEND_LIB");
  return {DeviceKind::Cuda, lib ? lib : ""};
}

// Rows through one expert: begin, run, finish.
std::vector<float> run_one(ExpertBackend& b, const ResidentExpert& e, const std::vector<float>& x, int64_t rows, int64_t d) {
  const RowBuffers io = b.row_buffers(rows);
  std::copy(x.begin(), x.end(), io.gathered);
  b.begin(io.gathered, rows, io.results);
  b.run({&e, 0, rows});
  b.finish();
  return std::vector<float>(io.results, io.results + rows * d);
}

TEST(CBackend, CallsCrossAsCAndGiveTheCpuResults) {
  ASSERT_FALSE(spec().cuda_library.empty()) << "MOERUN_TEST_BACKEND_LIB is not set (ctest sets it)";
  const model::ModelConfig c = config();
  Matmul mm;
  auto lib = make_expert_backend(spec(), c, mm, 0);
  CpuBackend cpu(c, mm);
  EXPECT_NE(lib->describe().find("cpu (oneDNN"), std::string::npos) << lib->describe();
  EXPECT_EQ(lib->weight_memory(), MemoryKind::Host);
  EXPECT_EQ(lib->expert_bytes(), cpu.expert_bytes());
  EXPECT_EQ(lib->weight_format(), c.expert_format);
  EXPECT_EQ(lib->stored_form(), nullptr) << "a library's experts are kept raw in L2";
  const int64_t d = c.hidden_size, ff = c.intermediate_size, rows = 5;
  const auto raw = convert::synth_tensor(3, "expert", 3 * ff * d, 0.2f);
  auto a = lib->allocate_expert(), b = cpu.allocate_expert();
  lib->load_expert(raw.data(), *a);
  cpu.load_expert(raw.data(), *b);
  EXPECT_EQ(a->buffer().kind, MemoryKind::Host);
  EXPECT_EQ(a->buffer().bytes, b->buffer().bytes);
  const auto x = convert::synth_tensor(4, "x", rows * d, 1.0f);
  EXPECT_EQ(run_one(*lib, *a, x, rows, d), run_one(cpu, *b, x, rows, d));
  ASSERT_NE(lib->timing(), nullptr);
  EXPECT_EQ(lib->timing()->dense_matmul_seconds(4, 8, 16, 1, 3).size(), 3u);
}

TEST(CBackend, ErrorsInsideTheLibraryComeBackAsTheirKind) {
  ASSERT_FALSE(spec().cuda_library.empty());
  Matmul mm;
  const std::string msg = moerun::testing::error_of([&] { make_expert_backend(spec(), config(), mm, 99); }, ErrorKind::Usage);
  EXPECT_NE(msg.find("injected: no device for local rank 99"), std::string::npos) << msg;
}

TEST(CBackend, ALibraryOfAnotherInterfaceVersionIsRefused) {
  ASSERT_FALSE(spec().cuda_library.empty());
  Matmul mm;
  const std::string msg = moerun::testing::error_of([&] { make_expert_backend(spec(), config(), mm, 98); }, ErrorKind::Usage);
  EXPECT_NE(msg.find("backend interface version 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rebuild the library"), std::string::npos) << msg;
}

// gpt-oss's expert: the biases (in the raw form after the matrices) and the clamped SwiGLU's
// alpha and limit cross the interface (version 2): the library computes what the CPU backend
// computes, bit for bit, and not the plain SwiGLU.
TEST(CBackend, GptOssExpertsCrossTheInterface) {
  ASSERT_FALSE(spec().cuda_library.empty());
  model::ModelConfig c = config();
  c.architecture = "gpt_oss";
  c.expert_bias = true;
  c.expert_activation = model::ExpertActivation::ClampedSwiGlu;
  c.swiglu_limit = 0.5;  // small: the clamp acts on these activations
  Matmul mm;
  auto lib = make_expert_backend(spec(), c, mm, 0);
  CpuBackend cpu(c, mm);
  model::ModelConfig plain = config();
  CpuBackend swiglu(plain, mm);
  EXPECT_EQ(lib->expert_bytes(), cpu.expert_bytes());
  const int64_t d = c.hidden_size, ff = c.intermediate_size, rows = 5;
  const auto raw = convert::synth_tensor(3, "expert", c.params_per_expert(), 0.2f);
  auto a = lib->allocate_expert(), b = cpu.allocate_expert(), p = swiglu.allocate_expert();
  lib->load_expert(raw.data(), *a);
  cpu.load_expert(raw.data(), *b);
  swiglu.load_expert(raw.data(), *p);  // the same matrices, without biases
  const auto x = convert::synth_tensor(4, "x", rows * d, 1.0f);
  const auto got = run_one(*lib, *a, x, rows, d);
  EXPECT_EQ(got, run_one(cpu, *b, x, rows, d));
  EXPECT_NE(got, run_one(swiglu, *p, x, rows, d)) << "the variant fields did not reach the library";
  (void)ff;
}

// The weight format crosses too: each quantized format's raw form through the library gives the
// in-process CPU backend's bits, and its slot bytes.
TEST(CBackend, QuantizedExpertsCrossTheInterface) {
  for (WeightScheme s : {WeightScheme::Q8, WeightScheme::Q4, WeightScheme::Int4, WeightScheme::Mxfp4, WeightScheme::Fp8Block}) {
    model::ModelConfig c = config();
    c.hidden_size = 64;  // whole groups of 32
    c.intermediate_size = 96;
    c.expert_format = {c.dtype, s};
    Matmul mm;
    auto lib = make_expert_backend(spec(), c, mm, 0);
    CpuBackend cpu(c, mm);
    EXPECT_EQ(lib->weight_format(), c.expert_format);
    EXPECT_EQ(lib->expert_bytes(), cpu.expert_bytes()) << c.expert_format.name();
    std::vector<float> dq[3];
    const AlignedBuffer raw = moerun::testing::quantized_expert(c, 31, dq);
    auto a = lib->allocate_expert(), b = cpu.allocate_expert();
    lib->load_expert(raw.data(), *a);
    cpu.load_expert(raw.data(), *b);
    const int64_t d = c.hidden_size, rows = 3;
    const auto x = convert::synth_tensor(4, "x", rows * d, 1.0f);
    EXPECT_EQ(run_one(*lib, *a, x, rows, d), run_one(cpu, *b, x, rows, d)) << c.expert_format.name();
  }
}

}  // namespace
}  // namespace moerun::experts

// Helpers shared by the unit tests: reproducible random tensors and weight matrices, the message of
// an expected error, scratch directories.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/matmul.hpp"
#include "convert/synthetic_model.hpp"

namespace moerun::testing {

inline std::vector<float> random_normal(std::size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A [rows, cols] weight in `dt` (bf16 values rounded to nearest even) from float32 values.
inline WeightMatrix make_weight(const std::vector<float>& w, int64_t rows, int64_t cols, DType dt) {
  WeightMatrix m;
  m.allocate(dt, rows, cols);
  if (dt == DType::F32)
    std::copy(w.begin(), w.end(), m.data.as<float>());
  else
    f32_to_bf16(w.data(), m.data.as<uint16_t>(), w.size());
  return m;
}

// The message of the moerun::Error `f` throws, after checking its kind ("" and a failure if none).
template <typename F>
std::string error_of(F f, ErrorKind kind) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

// A fresh, empty directory for the running test: TMPDIR/moerun-PREFIX-PID-TESTNAME (removed first
// if an earlier run left it).
inline std::filesystem::path scratch_dir(const std::string& prefix) {
  const auto dir = std::filesystem::temp_directory_path() / ("moerun-" + prefix + "-" + std::to_string(::getpid()) + "-" +
                                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A tiny synthetic model (2 layers x 4 experts of 16 x 24, top-2): small enough for unit tests that
// write and read real shards.
inline convert::SynthConfig tiny_synth_config(int shards) {
  convert::SynthConfig s;
  s.model.vocab_size = 32;
  s.model.hidden_size = 16;
  s.model.num_layers = 2;
  s.model.num_heads = 2;
  s.model.num_kv_heads = 1;
  s.model.head_dim = 8;
  s.model.intermediate_size = 24;
  s.model.num_experts = 4;
  s.model.top_k = 2;
  s.model.max_position = 64;
  s.shards = shards;
  return s;
}

}  // namespace moerun::testing

// q8/q4 experts in moe-hdf5 (format version 4): what synth writes is the quantization of the same
// seeded float32 weights, and a broken scale, type or byte is refused by name.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/quant_format.hpp"
#include "io/expert_shards.hpp"
#include "io/hdf5.hpp"
#include "io/model_file.hpp"
#include "io/synthetic_model.hpp"
#include "tests/test_support.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class QuantizedExperts : public ::testing::TestWithParam<WeightScheme> {
 protected:
  void SetUp() override {
    dir = moerun::testing::scratch_dir("qexp").string();
    SynthConfig s;
    ModelConfig& m = s.model;
    m.vocab_size = 50; m.hidden_size = 64; m.num_layers = 2; m.num_heads = 4; m.num_kv_heads = 2; m.head_dim = 16;
    m.intermediate_size = 96; m.num_experts = 4; m.top_k = 2; m.max_position = 64; m.bos_token_id = 1; m.eos_token_id = 2;
    m.dtype = DType::BF16;
    m.expert_format = {DType::BF16, GetParam()};
    s.shards = 2;
    write_synthetic_model(dir, s, true);
    config = read_model_config(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  template <typename F>
  void expect_error(F f, std::initializer_list<std::string> parts) {
    try {
      f();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
    }
  }
  std::string dir;
  ModelConfig config;
};

TEST_P(QuantizedExperts, StoredBytesAreTheQuantizationOfTheSeededWeights) {
  const WeightScheme s = GetParam();
  EXPECT_EQ(config.format_version, 4);
  EXPECT_EQ(config.expert_format.scheme, s);
  const ExpertShardIndex idx = ExpertShardIndex::build(dir, config);
  const AlignedBuffer raw = idx.load_raw(1, 2);  // verified: NaN scan and checksum
  ASSERT_EQ(raw.size(), expert_raw_bytes(config));
  EXPECT_EQ(static_cast<int64_t>(raw.size()), config.bytes_per_expert());
  const int64_t bits = s == WeightScheme::Q8 ? 8 * 32 + 16 : 4 * 32 + 32;  // per group of 32
  EXPECT_EQ(config.bytes_per_expert() * 8, config.params_per_expert() / 32 * bits);
  // The same synth_tensor, quantized here: byte for byte what the shard holds.
  const int64_t d = 64, ff = 96;
  const auto w2 = synth_tensor(SynthConfig{}.seed, expert_group_path(1, 2) + "/w2", d * ff, 1.0f / std::sqrt(static_cast<float>(ff)));
  std::vector<uint8_t> q(static_cast<std::size_t>(d * quant_row_bytes(s, ff)));
  std::vector<uint16_t> scales(static_cast<std::size_t>(d * quant_row_scales(s, ff)));
  quantize_rows(s, w2.data(), d, ff, q.data(), scales.data());
  const auto parts = expert_raw_parts(config);
  const ExpertPart& pv = expert_part(parts, "w2");
  const ExpertPart& ps = expert_part(parts, "w2_scales");
  EXPECT_EQ(std::memcmp(raw.as<uint8_t>() + pv.offset, q.data(), q.size()), 0);
  EXPECT_EQ(std::memcmp(raw.as<uint8_t>() + ps.offset, scales.data(), ps.bytes), 0);
  // And it dequantizes close to the float32 original.
  std::vector<float> back(w2.size());
  dequantize_rows(s, q.data(), scales.data(), d, ff, back.data());
  double err = 0, mag = 0;
  for (std::size_t i = 0; i < w2.size(); ++i) {
    err += std::pow(back[i] - w2[i], 2);
    mag += std::pow(w2[i], 2);
  }
  EXPECT_LT(std::sqrt(err / mag), s == WeightScheme::Q8 ? 0.01 : 0.12);
}

// Rewrites dataset `ds` of a shard in place: read as T, `change` applied, written back.
template <typename T, typename F>
void rewrite(const std::string& shard, const std::string& ds, hid_t mem_type, F change) {
  H5Handle f = h5_open_file(shard, H5Mode::ReadWrite);
  const H5DatasetInfo info = h5_dataset_info(f, ds);
  std::vector<T> v(static_cast<std::size_t>(info.shape[0] * info.shape[1]));
  h5_read(f, ds, mem_type, v.data());
  change(v, info.shape[1]);
  H5Handle d(H5Dopen2(f, ds.c_str(), H5P_DEFAULT), H5Dclose);
  ASSERT_GE(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()), 0);
}

TEST_P(QuantizedExperts, NanScaleIsNamedBeforeTheChecksum) {
  rewrite<uint16_t>(dir + "/" + shard_file_name(0), expert_group_path(0, 1) + "/w3_scales", H5T_NATIVE_UINT16,
                    [](std::vector<uint16_t>& v, int64_t cols) { v[static_cast<std::size_t>(2 * cols + 1)] = 0x7e00; });  // fp16 NaN
  const ExpertShardIndex idx = ExpertShardIndex::build(dir, config);
  expect_error([&] { idx.load_raw(0, 1); }, {"experts-00000.h5", "/layers/0/experts/1/w3_scales contains NaN at [2,1]"});
}

TEST_P(QuantizedExperts, ChangedValueByteIsAChecksumMismatch) {
  rewrite<uint8_t>(dir + "/" + shard_file_name(1), expert_group_path(1, 3) + "/w1", H5T_NATIVE_UINT8,
                   [](std::vector<uint8_t>& v, int64_t) { v[7] ^= 1; });
  const ExpertShardIndex idx = ExpertShardIndex::build(dir, config);
  expect_error([&] { idx.load_raw(1, 3); }, {"experts-00001.h5", "/layers/1/experts/3 checksum mismatch"});
}

TEST_P(QuantizedExperts, ValuesOfAnotherTypeAreRefused) {
  {
    H5Handle f = h5_open_file(dir + "/" + shard_file_name(0), H5Mode::ReadWrite);
    const std::string ds = expert_group_path(0, 0) + "/w2";
    const H5DatasetInfo info = h5_dataset_info(f, ds);
    ASSERT_GE(H5Ldelete(f, ds.c_str(), H5P_DEFAULT), 0);
    std::vector<float> v(static_cast<std::size_t>(info.shape[0] * info.shape[1]));
    h5_write(f, ds, info.shape, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, v.data(), true);
  }
  const char* want = GetParam() == WeightScheme::Q8 ? "expected int8" : "expected uint8";
  expect_error([&] { ExpertShardIndex::build(dir, config); }, {"experts-00000.h5", "/layers/0/experts/0/w2 has type float32", want});
}

INSTANTIATE_TEST_SUITE_P(Schemes, QuantizedExperts, ::testing::Values(WeightScheme::Q8, WeightScheme::Q4),
                         [](const auto& info) { return std::string(info.param == WeightScheme::Q8 ? "q8" : "q4"); });

TEST(QuantizedExpertsConfig, GroupsMustBeWhole) {
  ModelConfig m;
  m.architecture = "mixtral";
  m.vocab_size = 50; m.hidden_size = 48; m.num_layers = 1; m.num_heads = 4; m.num_kv_heads = 2; m.head_dim = 12;
  m.intermediate_size = 96; m.num_experts = 4; m.top_k = 2; m.max_position = 64; m.bos_token_id = 1; m.eos_token_id = 2;
  m.expert_format = {DType::F32, WeightScheme::Q4};
  try {
    m.validate("here");
    FAIL() << "hidden_size 48 is not whole groups of 32";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("expert_format q4 needs hidden_size (48)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moerun::io

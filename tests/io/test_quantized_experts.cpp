// Quantized experts in moe-hdf5 (q8/q4: format version 4; mxfp4, fp8-block: version 5): what synth
// writes is the quantization of the same seeded float32 weights, and a broken scale, value, type or
// byte is refused by name.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/native_quant.hpp"
#include "base/quant_format.hpp"
#include "io/expert_shards.hpp"
#include "io/hdf5.hpp"
#include "io/model_file.hpp"
#include "convert/synthetic_model.hpp"
#include "tests/test_support.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class QuantizedExperts : public ::testing::TestWithParam<WeightScheme> {
 protected:
  void SetUp() override {
    dir = moerun::testing::scratch_dir("qexp").string();
    convert::SynthConfig s;
    model::ModelConfig& m = s.model;
    m.vocab_size = 50;
    m.hidden_size = 64;
    m.num_layers = 2;
    m.num_heads = 4;
    m.num_kv_heads = 2;
    m.head_dim = 16;
    m.intermediate_size = 96;
    m.num_experts = 4;
    m.top_k = 2;
    m.max_position = 64;
    m.bos_token_id = 1;
    m.eos_token_id = 2;
    m.dtype = DType::BF16;
    m.expert_format = {DType::BF16, GetParam()};
    s.shards = 2;
    convert::write_synthetic_model(dir, s, true);
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
  model::ModelConfig config;
};

// One matrix [rows, cols] quantized as the writer stores it: values and scales, as raw bytes.
void quantize_matrix(WeightScheme s, const std::vector<float>& w, int64_t rows, int64_t cols, std::vector<uint8_t>& q,
                     std::vector<uint8_t>& scales) {
  switch (s) {
    case WeightScheme::Mxfp4:
      q.resize(rows * cols / 2);
      scales.resize(rows * cols / 32);
      return quantize_mxfp4(w.data(), rows, cols / 32, q.data(), scales.data());
    case WeightScheme::Fp8Block:
      q.resize(rows * cols);
      scales.resize(fp8_scale_rows(rows) * fp8_scale_cols(cols) * 4);
      return quantize_fp8_block(w.data(), rows, cols, q.data(), reinterpret_cast<float*>(scales.data()));
    default:  // int4: the level bytes after the scales, as the raw form holds them
      q.resize(rows * quant_row_bytes(s, cols));
      scales.resize(rows * quant_row_scales(s, cols) * 2 + (s == WeightScheme::Int4 ? rows * cols / 32 : 0));
      quantize_rows(s, w.data(), rows, cols, q.data(), reinterpret_cast<uint16_t*>(scales.data()),
                    s == WeightScheme::Int4 ? scales.data() + rows * cols / 16 : nullptr);
  }
}
std::vector<float> dequantize_matrix(WeightScheme s, const std::vector<uint8_t>& q, const std::vector<uint8_t>& scales, int64_t rows,
                                     int64_t cols) {
  std::vector<float> out(rows * cols);
  if (s == WeightScheme::Mxfp4)
    dequantize_mxfp4(q.data(), scales.data(), rows, cols / 32, out.data());
  else if (s == WeightScheme::Fp8Block)
    dequantize_fp8_block(q.data(), reinterpret_cast<const float*>(scales.data()), cols, 0, rows, out.data());
  else
    dequantize_rows(s, q.data(), reinterpret_cast<const uint16_t*>(scales.data()), rows, cols, out.data(),
                    s == WeightScheme::Int4 ? scales.data() + rows * cols / 16 : nullptr);
  return out;
}

TEST_P(QuantizedExperts, StoredBytesAreTheQuantizationOfTheSeededWeights) {
  const WeightScheme s = GetParam();
  const bool native = s == WeightScheme::Mxfp4 || s == WeightScheme::Fp8Block;
  EXPECT_EQ(config.format_version, s == WeightScheme::Int4 ? 9 : native ? 5 : 4);
  EXPECT_EQ(config.expert_format.scheme, s);
  const ExpertShardIndex idx = ExpertShardIndex::build(dir, config);
  const AlignedBuffer raw = idx.load_raw(1, 2);  // verified: NaN scan and checksum
  ASSERT_EQ(raw.size(), expert_raw_bytes(config));
  EXPECT_EQ(static_cast<int64_t>(raw.size()), config.bytes_per_expert());
  // Bits per group of 32 weights: values and scales (fp8: one byte a weight, a float per 128 x 128
  // block, here one block per matrix: 64 x 96 and 96 x 64).
  const int64_t bits = s == WeightScheme::Q8      ? 8 * 32 + 16
                       : s == WeightScheme::Q4    ? 4 * 32 + 32
                       : s == WeightScheme::Int4  ? 4 * 32 + 16 + 8
                       : s == WeightScheme::Mxfp4 ? 4 * 32 + 8
                                                  : 8 * 32;
  EXPECT_EQ(config.bytes_per_expert() * 8, config.params_per_expert() / 32 * bits + (native && s != WeightScheme::Mxfp4 ? 3 * 32 : 0));
  // The same synth_tensor, quantized here: byte for byte what the shard holds.
  const int64_t d = 64, ff = 96;
  const auto w2 =
      convert::synth_tensor(convert::SynthConfig{}.seed, expert_group_path(1, 2) + "/w2", d * ff, 1.0f / std::sqrt(static_cast<float>(ff)));
  std::vector<uint8_t> q, scales;
  quantize_matrix(s, w2, d, ff, q, scales);
  const auto parts = expert_raw_parts(config);
  const ExpertPart& pv = expert_part(parts, "w2");
  const ExpertPart& ps = expert_part(parts, "w2_scales");
  ASSERT_EQ(pv.bytes, q.size());
  ASSERT_EQ(ps.bytes + (s == WeightScheme::Int4 ? expert_part(parts, "w2_levels").bytes : 0), scales.size());
  if (s == WeightScheme::Int4) EXPECT_EQ(expert_part(parts, "w2_levels").offset, ps.offset + ps.bytes);
  EXPECT_EQ(std::memcmp(raw.as<uint8_t>() + pv.offset, q.data(), q.size()), 0);
  EXPECT_EQ(std::memcmp(raw.as<uint8_t>() + ps.offset, scales.data(), scales.size()), 0);
  // And it dequantizes close to the float32 original.
  const std::vector<float> back = dequantize_matrix(s, q, scales, d, ff);
  double err = 0, mag = 0;
  for (std::size_t i = 0; i < w2.size(); ++i) {
    err += std::pow(back[i] - w2[i], 2);
    mag += std::pow(w2[i], 2);
  }
  const double bound = s == WeightScheme::Q8         ? 0.01
                       : s == WeightScheme::Fp8Block ? 0.04
                       : s == WeightScheme::Int4     ? 0.14
                                                     : 0.12;  // 3 and 2 mantissa bits
  EXPECT_LT(std::sqrt(err / mag), bound);
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
  const std::string shard = dir + "/" + shard_file_name(0), ds = expert_group_path(0, 1) + "/w3_scales";
  auto load = [&] { ExpertShardIndex::build(dir, config).load_raw(0, 1); };  // an index per load: it keeps the file open
  switch (GetParam()) {
    case WeightScheme::Mxfp4:  // [96, 2] E8M0 bytes
      rewrite<uint8_t>(shard, ds, H5T_NATIVE_UINT8, [](std::vector<uint8_t>& v, int64_t cols) { v[2 * cols + 1] = 255; });
      return expect_error(load, {"experts-00000.h5", ds + " contains an E8M0 scale of 255 (NaN) at [2,1]"});
    case WeightScheme::Fp8Block:  // [1, 1] float32
      rewrite<float>(shard, ds, H5T_NATIVE_FLOAT, [](std::vector<float>& v, int64_t) { v[0] = INFINITY; });
      expect_error(load, {"experts-00000.h5", ds + " contains a block scale that is NaN or Inf at [0,0]"});
      rewrite<float>(shard, ds, H5T_NATIVE_FLOAT, [](std::vector<float>& v, int64_t) { v[0] = 0x1p118f; });  // issue 63's probe
      return expect_error(load, {ds + " contains a block scale of 2^64 or more"});
    case WeightScheme::Int4: {  // bf16 scales, each with its level byte, whose bit 7 makes it fp16
      const std::string levels = expert_group_path(0, 1) + "/w3_levels";
      rewrite<uint16_t>(shard, ds, H5T_NATIVE_UINT16,
                        [](std::vector<uint16_t>& v, int64_t cols) { v[2 * cols + 1] = 0x7fc0; });  // bf16 NaN
      expect_error(load, {"experts-00000.h5", ds + " contains a scale that is NaN or Inf at [2,1]"});
      // 0x7c00: a finite bf16 (2^121) but the fp16 Inf, once the level byte says fp16.
      rewrite<uint16_t>(shard, ds, H5T_NATIVE_UINT16, [](std::vector<uint16_t>& v, int64_t cols) { v[2 * cols + 1] = 0x7c00; });
      rewrite<uint8_t>(shard, levels, H5T_NATIVE_UINT8, [](std::vector<uint8_t>& v, int64_t cols) { v[2 * cols + 1] |= kInt4F16Scale; });
      expect_error(load, {ds + " contains a scale that is NaN or Inf at [2,1]"});
      rewrite<uint8_t>(shard, levels, H5T_NATIVE_UINT8, [](std::vector<uint8_t>& v, int64_t cols) { v[2 * cols + 1] = 0x18; });
      return expect_error(load, {ds + " contains a level byte with bits 4-6 set"});
    }
    default:
      rewrite<uint16_t>(shard, ds, H5T_NATIVE_UINT16,
                        [](std::vector<uint16_t>& v, int64_t cols) { v[2 * cols + 1] = 0x7e00; });  // fp16 NaN
      expect_error(load, {"experts-00000.h5", ds + " contains NaN at [2,1]"});
  }
}

// Only e4m3 has NaN codes among the stored values (every q8, q4 or MXFP4 byte is a number).
class Fp8Experts : public QuantizedExperts {};
TEST_P(Fp8Experts, NanValueCodeIsNamedBeforeTheChecksum) {
  const std::string ds = expert_group_path(0, 1) + "/w2";
  rewrite<uint8_t>(dir + "/" + shard_file_name(0), ds, H5T_NATIVE_UINT8,
                   [](std::vector<uint8_t>& v, int64_t cols) { v[3 * cols + 5] = 0xff; });
  const ExpertShardIndex idx = ExpertShardIndex::build(dir, config);
  expect_error([&] { idx.load_raw(0, 1); }, {"experts-00000.h5", ds + " contains an e4m3 NaN at [3,5]"});
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
  const char* want = GetParam() == WeightScheme::Q8 ? "expected int8" : "expected uint8";  // mxfp4 and e4m3 bytes too
  expect_error([&] { ExpertShardIndex::build(dir, config); }, {"experts-00000.h5", "/layers/0/experts/0/w2 has type float32", want});
}

std::string scheme_test_name(const ::testing::TestParamInfo<WeightScheme>& info) {
  return model::WeightFormat{DType::F32, info.param}.name() == "fp8-block" ? "fp8_block"
                                                                           : model::WeightFormat{DType::F32, info.param}.name();
}
INSTANTIATE_TEST_SUITE_P(Fp8, Fp8Experts, ::testing::Values(WeightScheme::Fp8Block), scheme_test_name);
INSTANTIATE_TEST_SUITE_P(Schemes, QuantizedExperts,
                         ::testing::Values(WeightScheme::Q8, WeightScheme::Q4, WeightScheme::Int4, WeightScheme::Mxfp4,
                                           WeightScheme::Fp8Block),
                         scheme_test_name);

TEST(QuantizedExpertsConfig, GroupsMustBeWhole) {
  model::ModelConfig m;
  m.architecture = "mixtral";
  m.vocab_size = 50;
  m.hidden_size = 48;
  m.num_layers = 1;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 12;
  m.intermediate_size = 96;
  m.num_experts = 4;
  m.top_k = 2;
  m.max_position = 64;
  m.bos_token_id = 1;
  m.eos_token_id = 2;
  for (WeightScheme s : {WeightScheme::Q4, WeightScheme::Mxfp4, WeightScheme::Fp8Block}) {
    m.expert_format = {DType::F32, s};
    try {
      m.validate("here");
      FAIL() << "hidden_size 48 is not whole groups of 32";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_NE(std::string(e.what()).find("expert_format " + m.expert_format.name() + " needs hidden_size (48)"), std::string::npos)
          << e.what();
    }
  }
}

TEST(QuantizedExpertsConfig, NativeFormatsNeedVersion5) {
  model::ModelConfig m;
  m.architecture = "mixtral";
  m.vocab_size = 50;
  m.hidden_size = 64;
  m.num_layers = 1;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 16;
  m.intermediate_size = 96;
  m.num_experts = 4;
  m.top_k = 2;
  m.max_position = 64;
  m.bos_token_id = 1;
  m.eos_token_id = 2;
  m.expert_format = {DType::F32, WeightScheme::Mxfp4};
  m.format_version = 4;
  try {
    m.validate("model.h5");
    FAIL() << "a version-4 file cannot hold mxfp4 experts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expert_format mxfp4 needs format_version 5, the file says 4"), std::string::npos) << e.what();
  }
  m.format_version = 5;
  EXPECT_NO_THROW(m.validate("model.h5"));
}

}  // namespace
}  // namespace moerun::io

// The dense cache (dense-q8.bin / dense-q4.bin next to model.h5, issue 41): what is written is read
// back byte for byte in place of the plain matrices; an entry quantized from other bytes (the model
// changed), a changed byte, a truncated or foreign file are not used (the matrices come back plain,
// to be quantized again), and a cache is never an error.
#include <gtest/gtest.h>

#include "tests/test_support.hpp"

#include <filesystem>
#include <fstream>

#include "base/matmul.hpp"
#include "io/dense_quant_cache.hpp"
#include "io/hdf5.hpp"
#include "io/model_file.hpp"
#include "convert/synthetic_model.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class DenseCache : public ::testing::TestWithParam<WeightScheme> {
 protected:
  void SetUp() override {
    dir = moerun::testing::scratch_dir("dcache").string();
    convert::SynthConfig s;
    model::ModelConfig& m = s.model;
    m.vocab_size = 50;
    m.hidden_size = 64;
    m.num_layers = 2;
    m.num_heads = 4;
    m.num_kv_heads = 2;
    m.head_dim = 16;
    m.intermediate_size = 32;
    m.num_experts = 4;
    m.top_k = 2;
    m.max_position = 64;
    m.bos_token_id = 1;
    m.eos_token_id = 2;
    m.dtype = DType::BF16;
    convert::write_synthetic_model(dir, s, true);
    path = dense_cache_path(dir, GetParam());
  }
  void TearDown() override { fs::remove_all(dir); }

  // Loads for the scheme, quantizes what is still plain, writes the cache; returns the quantized weights.
  DenseWeights quantize_and_keep() {
    DenseWeights w = load_dense_weights(dir, GetParam());
    Matmul mm;
    for (auto& [p, m] : quantizable_dense_matrices(w)) mm.quantize(*m, GetParam());
    EXPECT_TRUE(write_dense_cache(path, GetParam(), w, w.source_xxh64));
    return w;
  }
  static int quantized(DenseWeights& w) {
    int n = 0;
    for (auto& [p, m] : quantizable_dense_matrices(w)) n += m->scheme != WeightScheme::Plain;
    return n;
  }
  std::string dir, path;
};

TEST_P(DenseCache, ReadBackInPlaceOfThePlainMatrices) {
  DenseWeights first = quantize_and_keep();
  ASSERT_EQ(quantizable_dense_matrices(first).size(), 9u);  // lm_head + 4 per layer
  DenseWeights again = load_dense_weights(dir, GetParam());
  EXPECT_EQ(quantized(again), 9);
  auto a = quantizable_dense_matrices(first), b = quantizable_dense_matrices(again);
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].second->data.size(), b[i].second->data.size()) << a[i].first;
    EXPECT_EQ(std::memcmp(a[i].second->data.data(), b[i].second->data.data(), a[i].second->data.size()), 0) << a[i].first;
    EXPECT_EQ(b[i].second->dtype, DType::BF16);
  }
  // Plain loads do not look at it.
  DenseWeights plain = load_dense_weights(dir);
  EXPECT_EQ(quantized(plain), 0);
}

TEST_P(DenseCache, AnEntryFromOtherBytesIsNotUsed) {
  quantize_and_keep();
  // model.h5's wq of layer 1 changes (its xxh64 attribute with it): only that matrix is read plain.
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr_uint64(h5_open_object(f, "/layers/1/wq"), "xxh64", 12345);
  }
  DenseWeights w;
  try {
    w = load_dense_weights(dir, GetParam());  // the plain read then fails its own checksum
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/layers/1/wq checksum mismatch"), std::string::npos) << e.what();
    return;
  }
  FAIL() << "the changed dataset was taken from the cache";
}

TEST_P(DenseCache, DamagedOrForeignFilesGiveNothing) {
  quantize_and_keep();
  const auto size = fs::file_size(path);
  auto load_count = [&] {
    DenseWeights w = load_dense_weights(dir, GetParam());
    return quantized(w);
  };
  {  // one byte of the last matrix (layer 1 wo, in the last 4096-byte page) flipped
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size - 4096 + 10));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(size - 4096 + 10));
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  EXPECT_EQ(load_count(), 0);
  fs::resize_file(path, size / 2);  // truncated
  EXPECT_EQ(load_count(), 0);
  std::ofstream(path, std::ios::trunc) << "{\"not\": \"a cache\"}";
  EXPECT_EQ(load_count(), 0);
  fs::remove(path);
  fs::create_directory(path);  // not a regular file
  EXPECT_EQ(load_count(), 0);
}

TEST_P(DenseCache, TheOtherSchemesFileIsNotRead) {
  quantize_and_keep();
  const WeightScheme other = GetParam() == WeightScheme::Q4 ? WeightScheme::Q8 : WeightScheme::Q4;
  fs::rename(path, dense_cache_path(dir, other));
  DenseWeights w = load_dense_weights(dir, other);
  EXPECT_EQ(quantized(w), 0);
}

INSTANTIATE_TEST_SUITE_P(Q8AndQ4, DenseCache, ::testing::Values(WeightScheme::Q8, WeightScheme::Q4));

}  // namespace
}  // namespace moerun::io

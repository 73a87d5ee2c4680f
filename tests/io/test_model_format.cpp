// moe-hdf5 round trip and every validation failure: each test writes a small synthetic model,
// breaks one thing in it, and checks the error's kind (exit code) and that it names the file and
// the offending attribute or dataset.
#include <gtest/gtest.h>

#include "tests/test_support.hpp"

#include <cmath>
#include <filesystem>
#include <functional>

#include "io/expert_shards.hpp"
#include "io/hdf5.hpp"
#include "io/model_file.hpp"
#include "convert/synthetic_model.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

// A small model of `layers` layers (4 experts of 24, top-2, d 16).
convert::SynthConfig small_model(int64_t layers) {
  convert::SynthConfig s;
  model::ModelConfig& m = s.model;
  m.vocab_size = 50;
  m.hidden_size = 16;
  m.num_layers = layers;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 4;
  m.intermediate_size = 24;
  m.num_experts = 4;
  m.top_k = 2;
  m.max_position = 64;
  m.bos_token_id = 1;
  m.eos_token_id = 2;
  return s;
}

class ModelFormat : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = moerun::testing::scratch_dir("fmt").string();
    convert::SynthConfig s = small_model(2);
    s.shards = 2;
    convert::write_synthetic_model(dir, s, true);
  }
  void TearDown() override { fs::remove_all(dir); }

  // Expects `f` to throw an Error of `kind` whose message contains every one of `parts`.
  template <typename F>
  void expect_error(F f, ErrorKind kind, std::initializer_list<std::string> parts) {
    try {
      f();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
    }
  }
  void load_all() {
    model::ModelConfig c = read_model_config(dir);
    load_dense_weights(dir);
    ExpertShardIndex idx = ExpertShardIndex::build(dir, c);
    for (int64_t l = 0; l < c.num_layers; ++l)
      for (int64_t e = 0; e < c.num_experts; ++e) idx.load_raw(l, e);
  }
  std::string shard(int i) { return dir + "/" + shard_file_name(i); }
  std::string dir;
};

// The table is read as tokens need it, so a model.h5 cut short after the load is found at a
// lookup: BadInput naming the file (a mapped table was a SIGBUS there).
TEST_F(ModelFormat, EmbeddingRowPastATruncatedFileIsBadInputNamingIt) {
  DenseWeights w = load_dense_weights(dir);
  ASSERT_NE(w.embed_tokens.file, nullptr);
  fs::resize_file(dir + "/model.h5", w.embed_tokens.file_offset + w.embed_tokens.row_bytes());  // row 0 only
  AlignedBuffer scratch;
  EXPECT_NE(w.embed_tokens.row(0, scratch), nullptr);
  expect_error([&] { w.embed_tokens.row(49, scratch); }, ErrorKind::BadInput, {"model.h5", "ends before byte"});
}

TEST_F(ModelFormat, RoundTrip) {
  model::ModelConfig c = read_model_config(dir);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.intermediate_size, 24);
  DenseWeights w = load_dense_weights(dir);
  auto embed = convert::synth_tensor(1, "/embed_tokens", 50 * 16, 1.0f);
  ASSERT_EQ(w.embed_tokens.dtype, DType::F32);  // this model's dtype: kept as stored
  // A local model's table stays in model.h5 (issue 41): each row is read as it is looked up.
  ASSERT_EQ(w.embed_tokens.data, nullptr);
  ASSERT_NE(w.embed_tokens.file, nullptr);
  AlignedBuffer scratch;
  for (int64_t id : {0, 1, 17, 49}) {
    const auto* row = static_cast<const float*>(w.embed_tokens.row(id, scratch));
    EXPECT_EQ(std::vector<float>(row, row + 16), std::vector<float>(embed.begin() + id * 16, embed.begin() + (id + 1) * 16)) << id;
  }
  ExpertShardIndex idx = ExpertShardIndex::build(dir, c);
  EXPECT_EQ(idx.shards().size(), 2u);
  EXPECT_EQ(idx.locate(0, 0).shard, shard(0));
  EXPECT_EQ(idx.locate(1, 3).shard, shard(1));
  const AlignedBuffer raw = idx.load_raw(1, 2);  // w1 ‖ w3 ‖ w2
  ASSERT_EQ(raw.size(), 3u * 24 * 16 * 4);
  auto w3 = convert::synth_tensor(1, expert_group_path(1, 2) + "/w3", 24 * 16, 1.0f / 4);
  EXPECT_TRUE(std::equal(w3.begin(), w3.end(), raw.as<float>() + 24 * 16));
  // Shards are one chunk per matrix.
  H5Handle f = h5_open_file(shard(1), H5Mode::ReadOnly);
  EXPECT_EQ(h5_dataset_info(f, expert_group_path(1, 2) + "/w2").chunk, (std::vector<int64_t>{16, 24}));
}

TEST_F(ModelFormat, ExpertFormatIsWrittenReadAndChecked) {
  EXPECT_EQ(read_model_config(dir).expert_format, (model::WeightFormat{DType::F32, WeightScheme::Plain}));
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadOnly);
    EXPECT_EQ(h5_attr_string(f, "expert_format"), "float32");
  }
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_delete_attr(f, "expert_format");
  }
  EXPECT_EQ(read_model_config(dir).expert_format.scheme, WeightScheme::Plain) << "a file without it has plain experts";
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "expert_format", std::string("q8"));
  }
  // q8 needs whole groups of 32 (this model's hidden size is 16) and a version-4 file.
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "expert_format q8 needs"});
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_delete_attr(f, "expert_format");
    h5_set_attr(f, "expert_format", std::string("int3"));
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "expert_format \"int3\""});
}

// Version 7's rotary_dim: written only when part of each head rotates, read back, and refused when
// odd, past head_dim, or in a file of an older version.
TEST_F(ModelFormat, RotaryDimIsVersion7AndChecked) {
  EXPECT_EQ(read_model_config(dir).rotary_dim, 0);
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadOnly);
    EXPECT_FALSE(h5_attr_int(f, "rotary_dim").has_value()) << "a model that rotates whole heads keeps its older version's attributes";
  }
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "rotary_dim", int64_t{2});
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "rotary_dim needs format_version 7"});
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "format_version", int64_t{7});
  }
  EXPECT_EQ(read_model_config(dir).rotary_dim, 2);
  for (int64_t bad : {3, 6}) {  // odd; past head_dim 4
    {
      H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
      h5_set_attr(f, "rotary_dim", bad);
    }
    expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "attribute rotary_dim is " + std::to_string(bad)});
  }
}

// Expects `f` to throw a BadInput error whose message contains `part`.
template <typename F>
void expect_bad_input(F f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error for " << part;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Version 8 (Qwen3-Next): linear layers, the output gate and the norm offset written, read back
// with the parameter count derived by hand, the offset added at load, refused in an older version.
TEST(ModelFormatLinear, LinearLayersAreVersion8AndCounted) {
  const std::string dir = moerun::testing::scratch_dir("fmt-linear").string();
  convert::SynthConfig s = small_model(2);
  model::ModelConfig& m = s.model;
  convert::apply_family("qwen3_next", m);  // 2 layers: linear, then full (the last)
  m.linear = {.k_heads = 1, .v_heads = 2, .k_dim = 4, .v_dim = 3, .conv_kernel = 4};
  convert::write_synthetic_model(dir, s, true);
  const model::ModelConfig c = read_model_config(dir);
  EXPECT_EQ(c.format_version, 8);
  EXPECT_EQ(model::layer_attention_text(c.layer_attention), "linear,full");
  EXPECT_EQ(c.linear.v_dim, 3);
  EXPECT_TRUE(c.attention_output_gate);
  EXPECT_EQ(c.norm_weight_offset, 1.0);
  // Linear layer: w_qkv (2*4 + 6 = 14 channels) x 16, w_z 6 x 16, w_b and w_a 2 x 16, conv 14 x 4,
  // dt_bias and A_log 2 each, norm 3, out_proj 16 x 6, two norms of 16.
  const int64_t linear = 14 * 16 + 6 * 16 + 2 * 2 * 16 + 14 * 4 + 2 * 2 + 3 + 16 * 6 + 2 * 16;
  // Full layer: q, gate 16 x 16 each, k, v 8 x 16 each, o 16 x 16, per-head q/k norms of 4, two norms.
  const int64_t full = 3 * 16 * 16 + 2 * 8 * 16 + 2 * 4 + 2 * 16;
  const int64_t moe = 4 * 16 + 3 * 24 * 16 + 16;  // gate; the gated shared expert of intermediate_size
  EXPECT_EQ(c.dense_params(), 2 * 50 * 16 + 16 + linear + full + 2 * moe);
  const DenseWeights w = load_dense_weights(dir);
  EXPECT_EQ(w.layers[0].matrix("linear/w_qkv")->rows, 14);
  EXPECT_EQ(w.layers[0].matrix("wo")->cols, 6);
  EXPECT_EQ(w.layers[0].matrix("wq"), nullptr) << "a linear layer has no q projection";
  EXPECT_EQ(w.layers[1].matrix("wq_gate")->rows, 16);
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadOnly);
    std::vector<float> stored(16);
    h5_read(f, "/final_norm", H5T_NATIVE_FLOAT, stored.data());
    EXPECT_EQ(w.final_norm[3], stored[3] + 1.0f) << "the (1 + w) norm: the offset added once at load";
  }
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "norm_weight_offset", 0.5);
  }
  expect_bad_input([&] { read_model_config(dir); }, "attribute norm_weight_offset is 0.5, expected 0 or 1");
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "norm_weight_offset", 1.0);
  }
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "linear_k_heads", int64_t{4});
  }
  expect_bad_input([&] { read_model_config(dir); }, "linear_v_heads (2) is not a multiple of linear_k_heads (4)");
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "linear_k_heads", int64_t{1});
  }
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "format_version", int64_t{7});
  }
  expect_bad_input([&] { read_model_config(dir); }, "need format_version 8");
  fs::remove_all(dir);
}

// The version-3 variant attributes: each value outside its set is exit 3 naming the file and the
// attribute (or entry), before anything is sized from it.
TEST_F(ModelFormat, BadLayerVariantsAreRefused) {
  auto edit = [&](const std::function<void(hid_t)>& f) {
    H5Handle h = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    f(h);
  };
  auto set_text = [](const char* name, const char* value) {
    return [=](hid_t f) {
      if (h5_attr_string(f, name)) h5_delete_attr(f, name);
      h5_set_attr(f, name, std::string(value));
    };
  };
  auto refused = [&](std::initializer_list<std::string> parts) {
    expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, parts);
  };
  edit([](hid_t f) { h5_set_attr(f, "qk_norm", int64_t{3}); });
  refused({"model.h5", "qk_norm is 3"});
  edit([](hid_t f) { h5_set_attr(f, "qk_norm", int64_t{0}); });
  edit(set_text("rope_type", "dynamic"));
  refused({"model.h5", "rope_type is dynamic"});
  edit(set_text("rope_type", "longrope"));
  refused({"model.h5", "\"longrope\" is not supported"});
  edit(set_text("rope_type", "default"));
  EXPECT_NO_THROW(read_model_config(dir));
  edit(set_text("layer_types", "full,chunked"));
  refused({"model.h5", "layer_types entry 1 is \"chunked\""});
  edit(set_text("layer_types", "full"));
  refused({"model.h5", "layer_types has 1 entries for 2 layers"});
  edit(set_text("layer_types", "sliding,full"));
  refused({"model.h5", "sliding layers but sliding_window is 0"});
  edit([](hid_t f) { h5_set_attr(f, "sliding_window", int64_t{4}); });
  EXPECT_EQ(read_model_config(dir).window_of(0), 4);
  EXPECT_EQ(read_model_config(dir).window_of(1), 0);
}

// Dense MLP layers (layer_mlp): the expert tables number the MoE layers only, the dense layer's MLP
// lives in model.h5, and every count follows.
TEST(ModelFormatDense, DenseLayersRoundTripWithExpertsNumberedByMoeLayer) {
  const std::string dir = moerun::testing::scratch_dir("fmt-dense").string();
  convert::SynthConfig s = small_model(3);
  model::ModelConfig& m = s.model;
  m.layer_mlp = {model::MlpKind::Dense, model::MlpKind::Moe, model::MlpKind::Moe};
  m.dense_intermediate_size = 40;
  convert::write_synthetic_model(dir, s, true);
  const model::ModelConfig c = read_model_config(dir);
  EXPECT_EQ(model::layer_mlp_text(c.layer_mlp), "dense,moe,moe");
  EXPECT_EQ(c.dense_intermediate_size, 40);
  EXPECT_EQ(c.num_moe_layers(), 2);
  EXPECT_EQ(c.moe_index(0), -1);
  EXPECT_EQ(c.moe_index(2), 1);
  EXPECT_EQ(c.expert_params(), 2 * 4 * 3 * 16 * 24);
  // 3 layers of attention and norms, 2 gates, 1 dense MLP; embeddings, LM head and final norm.
  const int64_t attention = 16 + 16 * 16 + 2 * 8 * 16 + 16 * 16 + 16;
  EXPECT_EQ(c.dense_params(), 2 * 50 * 16 + 16 + 3 * attention + 2 * 4 * 16 + 3 * 40 * 16);
  const DenseWeights w = load_dense_weights(dir);
  EXPECT_EQ(w.layers[0].matrix("mlp/w2")->rows, 16);
  EXPECT_EQ(w.layers[0].matrix("mlp/w2")->cols, 40);
  EXPECT_EQ(w.layers[0].matrix("gate"), nullptr) << "a dense layer has no gate";
  EXPECT_EQ(w.layers[1].matrix("gate")->rows, 4);
  const ExpertShardIndex idx = ExpertShardIndex::build(dir, c);
  EXPECT_NO_THROW(idx.load_raw(1, 3));
  EXPECT_THROW(idx.locate(2, 0), Error) << "there are 2 MoE layers, not 3";
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadOnly);
    EXPECT_FALSE(h5_exists(f, "/layers/0/gate"));
  }
  auto set_attr = [&](const std::function<void(hid_t)>& edit) {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    edit(f);
  };
  auto set_mlp = [&](const char* v) {
    set_attr([&](hid_t f) {
      h5_delete_attr(f, "layer_mlp");
      h5_set_attr(f, "layer_mlp", std::string(v));
    });
  };
  auto refused = [&](const std::string& part) {
    expect_bad_input([&] { read_model_config(dir); }, "model.h5");
    expect_bad_input([&] { read_model_config(dir); }, part);
  };
  set_mlp("dense,sparse,moe");
  refused("layer_mlp entry 1 is \"sparse\", expected moe or dense");
  set_mlp("dense,moe");
  refused("layer_mlp has 2 entries for 3 layers");
  set_mlp("dense,dense,dense");
  refused("layer_mlp has no moe layer");
  set_mlp("dense,moe,moe");
  set_attr([](hid_t f) { h5_set_attr(f, "dense_intermediate_size", int64_t{0}); });
  refused("dense_intermediate_size is 0");
  set_attr([](hid_t f) { h5_set_attr(f, "dense_intermediate_size", int64_t{24}); });
  expect_bad_input([&] { load_dense_weights(dir); }, "/layers/0/mlp/w1");
  fs::remove_all(dir);
}

TEST_F(ModelFormat, MissingDirectory) {
  expect_error([&] { read_model_config(dir + "-nope"); }, ErrorKind::Io, {"-nope", "does not exist"});
}

TEST_F(ModelFormat, TruncatedModelFile) {
  fs::resize_file(dir + "/model.h5", 1000);
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "not a readable HDF5 file"});
}

TEST_F(ModelFormat, MissingAttribute) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_delete_attr(f, "top_k");
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "top_k is missing"});
}

TEST_F(ModelFormat, KvHeadsMustDivideHeads) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "num_kv_heads", int64_t{3});
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "num_kv_heads (3) does not divide num_heads (4)"});
}

TEST_F(ModelFormat, TopKAtMostExperts) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "top_k", int64_t{5});
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "top_k (5) exceeds num_experts (4)"});
}

TEST_F(ModelFormat, AttributesOfOtherIntegerTypesLoad) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "top_k", 2.0);  // a float where an integer is expected is a type error...
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5", "top_k", "expected an integer"});
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr_uint64(f, "top_k", 2);  // ...but any integer type is fine
    h5_set_attr(f, "rope_theta", int64_t{10000});  // and an integer where a float is expected
  }
  EXPECT_EQ(read_model_config(dir).top_k, 2);
}

TEST_F(ModelFormat, WrongShape) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_delete(f, "/layers/1/wk");
    std::vector<float> z(4 * 16, 0.0f);
    h5_write(f, "/layers/1/wk", {4, 16}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, z.data(), false);
  }
  expect_error([&] { load_dense_weights(dir); }, ErrorKind::BadInput, {"model.h5: /layers/1/wk has shape [4,16], expected [8,16]"});
}

TEST_F(ModelFormat, WrongDtype) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_delete(f, "/final_norm");
    std::vector<int32_t> z(16, 1);
    h5_write(f, "/final_norm", {16}, H5T_STD_I32LE, H5T_NATIVE_INT32, z.data(), false);
  }
  expect_error([&] { load_dense_weights(dir); }, ErrorKind::BadInput, {"model.h5: /final_norm has type int32, expected float32"});
}

TEST_F(ModelFormat, MissingDataset) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_delete(f, "/layers/0/gate");
  }
  expect_error([&] { load_dense_weights(dir); }, ErrorKind::BadInput, {"model.h5: dataset /layers/0/gate is missing"});
}

TEST_F(ModelFormat, ExpertInNoShard) {
  {
    H5Handle f = h5_open_file(shard(1), H5Mode::ReadWrite);
    h5_delete(f, "/layers/1/experts/2");
  }
  expect_error([&] { load_all(); }, ErrorKind::BadInput, {"/layers/1/experts/2 is in no shard"});
}

TEST_F(ModelFormat, ExpertInTwoShards) {
  {
    convert::SynthConfig s;
    s.model = read_model_config(dir);
    ExpertShardWriter w(shard(2), s.model);
    std::vector<float> a(24 * 16, 0.5f);
    w.write(0, 1, a.data(), a.data(), a.data());
  }
  expect_error([&] { load_all(); }, ErrorKind::BadInput, {"experts-00002.h5: /layers/0/experts/1 is also in", "experts-00000.h5"});
}

TEST_F(ModelFormat, ChecksumMismatch) {
  {
    H5Handle f = h5_open_file(shard(0), H5Mode::ReadWrite);
    h5_delete(f, "/layers/0/experts/3/w2");
    std::vector<float> z(16 * 24, 0.25f);
    h5_write(f, "/layers/0/experts/3/w2", {16, 24}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, z.data(), true);
  }
  expect_error([&] { load_all(); }, ErrorKind::BadInput, {"experts-00000.h5", "/layers/0/experts/3 checksum mismatch"});
}

TEST_F(ModelFormat, BadExpertGroupName) {
  {
    H5Handle f = h5_open_file(shard(0), H5Mode::ReadWrite);
    h5_create_group(f, "/layers/0/experts/07");
  }
  expect_error([&] { load_all(); }, ErrorKind::BadInput, {"experts-00000.h5", "/layers/0/experts/07 is not an expert index"});
}

TEST_F(ModelFormat, NanWeightNamedByCheck) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    std::vector<float> q(256, 0.1f);
    q[3 * 16 + 5] = NAN;
    h5_delete(f, "/layers/1/wq");
    h5_write(f, "/layers/1/wq", {16, 16}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, q.data(), false);
  }
  // Always scanned (not only on request): a NaN weight would silently turn every token into 0.
  expect_error([&] { load_dense_weights(dir); }, ErrorKind::BadInput, {"model.h5: /layers/1/wq contains NaN at [3,5]"});
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    std::vector<float> q(256, 0.1f);
    h5_delete(f, "/layers/1/wq");
    h5_write(f, "/layers/1/wq", {16, 16}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, q.data(), false);
    std::vector<float> n(16, 1.0f);
    n[9] = -INFINITY;
    h5_delete(f, "/final_norm");
    h5_write(f, "/final_norm", {16}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, n.data(), false);
  }
  expect_error([&] { load_dense_weights(dir); }, ErrorKind::BadInput, {"model.h5: /final_norm contains Inf at [9,0]"});
}

TEST_F(ModelFormat, Bf16ModelLoadsAsUint16) {
  fs::remove_all(dir);
  convert::SynthConfig s;
  model::ModelConfig& m = s.model;
  m.vocab_size = 50;
  m.hidden_size = 16;
  m.num_layers = 1;
  m.num_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 4;
  m.intermediate_size = 24;
  m.num_experts = 2;
  m.top_k = 1;
  m.max_position = 64;
  m.dtype = DType::BF16;
  s.shards = 1;
  convert::write_synthetic_model(dir, s, true);
  H5Handle f = h5_open_file(shard(0), H5Mode::ReadOnly);
  EXPECT_EQ(h5_dataset_info(f, "/layers/0/experts/1/w1").type.describe(), "uint16");
  EXPECT_NO_THROW(load_all());
}

TEST_F(ModelFormat, DenseTensorsCarryChecksums) {  // format version 2
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    EXPECT_EQ(h5_attr_int(f, "format_version").value(), 3);
    EXPECT_TRUE(h5_attr_uint64(h5_open_object(f, "/layers/1/wk"), "xxh64").has_value());
    // Same shape, other values: only the checksum can tell.
    h5_delete(f, "/layers/1/wk");
    std::vector<float> w(8 * 16, 0.125f);
    h5_write(f, "/layers/1/wk", {8, 16}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, w.data(), false);
    h5_set_attr_uint64(h5_open_object(f, "/layers/1/wk"), "xxh64", 12345);
  }
  expect_error([&] { load_dense_weights(dir); }, ErrorKind::BadInput, {"model.h5: /layers/1/wk checksum mismatch (xxh64 attribute 12345"});
}

TEST_F(ModelFormat, DenseTensorWithoutChecksumIsRefusedInVersion2) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_delete_attr(h5_open_object(f, "/final_norm"), "xxh64");
  }
  expect_error([&] { load_dense_weights(dir); }, ErrorKind::BadInput, {"model.h5: /final_norm has no xxh64 attribute"});
}

TEST_F(ModelFormat, Version1FilesStillLoadWithoutChecksumsOrShardRecord) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "format_version", int64_t{1});
    h5_delete(f, "/expert_shards");
    h5_delete_attr(h5_open_object(f, "/final_norm"), "xxh64");
  }
  EXPECT_NO_THROW(load_all());
  EXPECT_TRUE(read_model_config(dir).shard_ids.empty());
}

TEST_F(ModelFormat, UnknownVersionAndMalformedShardRecordAreRefused) {
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "format_version", int64_t{12});
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5: root attribute format_version is 12, expected 1 to 11"});
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_set_attr(f, "format_version", int64_t{2});
    h5_delete(f, "/expert_shards");
    const std::vector<int32_t> ids{1, 2};
    h5_write(f, "/expert_shards", {2}, H5T_STD_I32LE, H5T_NATIVE_INT32, ids.data(), false);
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5: /expert_shards must be uint64 [0..100000], is int32 [2]"});
  {
    H5Handle f = h5_open_file(dir + "/model.h5", H5Mode::ReadWrite);
    h5_delete(f, "/expert_shards");
  }
  expect_error([&] { read_model_config(dir); }, ErrorKind::BadInput, {"model.h5: dataset /expert_shards is missing"});
}

TEST_F(ModelFormat, ShardsAreBoundToTheirModel) {
  const model::ModelConfig c = read_model_config(dir);
  ASSERT_EQ(c.shard_ids.size(), 2u);
  EXPECT_EQ(ExpertShardIndex::build(dir, c).shard_identities(), c.shard_ids);
  // The identity covers (layer, expert, checksum), in (layer, expert) order whatever the write order.
  EXPECT_EQ(shard_identity({{0, 1, 7}, {0, 0, 9}}), shard_identity({{0, 0, 9}, {0, 1, 7}}));
  EXPECT_NE(shard_identity({{0, 0, 9}, {0, 1, 7}}), shard_identity({{0, 0, 7}, {0, 1, 9}}));
  EXPECT_NE(shard_identity({{0, 0, 9}}), shard_identity({{1, 0, 9}}));
  // A shard whose expert checksums changed (rewritten consistently, so each expert verifies).
  {
    H5Handle f = h5_open_file(shard(1), H5Mode::ReadWrite);
    const std::string gp = h5_children(f, "/layers/1/experts").empty() ? "" : "/layers/1/experts/" + h5_children(f, "/layers/1/experts")[0];
    ASSERT_FALSE(gp.empty());
    h5_set_attr_uint64(h5_open_object(f, gp), "xxh64", 42);
  }
  expect_error([&] { ExpertShardIndex::build(dir, c); }, ErrorKind::BadInput,
               {"experts-00001.h5: is not the shard", "model.h5 was written with"});
}

}  // namespace
}  // namespace moerun::io

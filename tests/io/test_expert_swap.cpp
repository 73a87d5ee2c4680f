// Hot-swap control files: every malformed field is BadInput naming the file and the field, paths
// resolve against the control file's directory, and the experts read from a real shard are verified
// (NaN weights fail naming the shard and the tensor; experts this rank does not own are skipped).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "base/error.hpp"
#include "io/expert_swap.hpp"
#include "io/expert_shards.hpp"
#include "convert/synthetic_model.hpp"
#include "tests/test_support.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;

class ExpertSwapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = moerun::testing::scratch_dir("swap");
    convert::SynthConfig s = moerun::testing::tiny_synth_config(1);
    convert::write_synthetic_model((dir_ / "new").string(), s, true);
    config_ = s.model;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string control(const std::string& text) const {
    const std::string p = (dir_ / "swap.json").string();
    std::ofstream(p) << text;
    return p;
  }
  // The error message of parsing `text`, or "" when it parses.
  std::string parse_error(const std::string& text) const {
    try {
      read_swap_control(control(text), config_);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 3) << e.what();
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  model::ModelConfig config_;
};

TEST_F(ExpertSwapTest, MalformedControlFilesNameTheField) {
  EXPECT_NE(parse_error("{\"swaps\": [").find("not valid JSON at byte"), std::string::npos);
  EXPECT_NE(parse_error("[]").find("field \"swaps\""), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": []}").find("field \"swaps\""), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"experts\": \"all\"}]}").find("swaps[0].shard"), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"shard\": 7, \"experts\": \"all\"}]}").find("swaps[0].shard"), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"shard\": \"a.h5\"}]}").find("swaps[0].experts is missing"), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"shard\": \"a.h5\", \"experts\": \"some\"}]}").find("swaps[0].experts must be"), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"shard\": \"a.h5\", \"experts\": []}]}").find("swaps[0].experts must be"), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"shard\": \"a.h5\", \"experts\": [[1]]}]}").find("is not [layer, expert]"), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"shard\": \"a.h5\", \"experts\": [[0, 1.5]]}]}").find("is not [layer, expert]"), std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"shard\": \"a.h5\", \"experts\": [[2, 0]]}]}").find("outside the model's 2 MoE layers x 4"),
            std::string::npos);
  EXPECT_NE(parse_error("{\"swaps\": [{\"shard\": \"a.h5\", \"experts\": [[0, -1]]}]}").find("outside"), std::string::npos);
  // The file is named in every message.
  EXPECT_NE(parse_error("{\"swaps\": 1}").find((dir_ / "swap.json").string()), std::string::npos);
}

TEST_F(ExpertSwapTest, PathsResolveAgainstTheControlFile) {
  const auto swaps = read_swap_control(
      control("{\"swaps\": [{\"shard\": \"new/experts-00000.h5\", \"experts\": [[0, 1], [1, 3]]}, {\"shard\": \"/abs.h5\", "
              "\"experts\": \"all\"}]}"),
      config_);
  ASSERT_EQ(swaps.size(), 2u);
  EXPECT_EQ(swaps[0].shard, (dir_ / "new/experts-00000.h5").string());
  EXPECT_EQ(swaps[0].experts, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 3}}));
  EXPECT_FALSE(swaps[0].all);
  EXPECT_EQ(swaps[1].shard, "/abs.h5");
  EXPECT_TRUE(swaps[1].all);
}

TEST_F(ExpertSwapTest, ReadsOwnedExpertsVerifiedAndRefusesBadOnes) {
  const std::string shard = (dir_ / "new/experts-00000.h5").string();
  const std::vector<ExpertSwap> all{{shard, {}, true}};
  // This rank owns the experts of layer 1 only.
  const auto got = read_swap_experts(all, config_, [](int64_t l, int64_t) { return l == 1; });
  ASSERT_EQ(got.size(), 4u);
  for (const auto& w : got) {
    EXPECT_EQ(w.layer, 1);
    EXPECT_EQ(w.raw.size(), expert_raw_bytes(config_));
  }
  // A listed expert the shard does not hold.
  const std::string other = (dir_ / "other.h5").string();
  {
    ExpertShardWriter w(other, config_);
    const auto t = moerun::testing::random_normal(static_cast<std::size_t>(24 * 16), 1);
    w.write(0, 0, t.data(), t.data(), t.data());
  }
  try {
    read_swap_experts({{other, {{0, 0}, {0, 2}}, false}}, config_, [](int64_t, int64_t) { return true; });
    FAIL() << "a missing group must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/layers/0/experts/2 is not in this shard"), std::string::npos) << e.what();
  }
  // NaN weights (checksummed as written): refused before any checksum, naming the tensor.
  const std::string bad = (dir_ / "nan.h5").string();
  {
    ExpertShardWriter w(bad, config_);
    auto t = moerun::testing::random_normal(static_cast<std::size_t>(24 * 16), 2);
    t[7] = std::numeric_limits<float>::quiet_NaN();
    w.write(1, 2, t.data(), t.data(), t.data());
  }
  try {
    read_swap_experts({{bad, {}, true}}, config_, [](int64_t, int64_t) { return true; });
    FAIL() << "NaN weights must fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 3);
    EXPECT_NE(std::string(e.what()).find("/layers/1/experts/2/w1 contains NaN"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  // A shard that does not exist.
  EXPECT_THROW(read_swap_experts({{(dir_ / "none.h5").string(), {}, true}}, config_, [](int64_t, int64_t) { return true; }), Error);
}

}  // namespace
}  // namespace moerun::io

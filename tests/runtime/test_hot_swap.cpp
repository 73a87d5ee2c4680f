// HotSwap on real model files: a control file there at the start is applied before the first step
// (the experts then compute exactly what the new model's experts compute); an unchanged control file
// is not read again; a changed one is loaded in the background and applied at a later step
// boundary; a control file that fails its checks changes nothing and is counted as failed.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "experts/backend.hpp"
#include "experts/resident_experts.hpp"
#include "io/expert_shards.hpp"
#include "io/model_location.hpp"
#include "convert/synthetic_model.hpp"
#include "runtime/hot_swap.hpp"
#include "runtime/moe_layer.hpp"
#include "tests/test_support.hpp"

namespace moerun::runtime {
namespace {

namespace fs = std::filesystem;

class HotSwapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = moerun::testing::scratch_dir("hot-swap");
    convert::SynthConfig s = moerun::testing::tiny_synth_config(2);
    convert::write_synthetic_model((dir_ / "a").string(), s, true);
    s.seed = 2;
    convert::write_synthetic_model((dir_ / "b").string(), s, true);
    mc_ = s.model;
    backend_ = experts::make_expert_backend({}, mc_, mm_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<experts::ResidentExperts> store_of(const std::string& model) {
    indexes_.push_back(
        std::make_unique<io::ExpertShardIndex>(io::ExpertShardIndex::build(io::model_location((dir_ / model).string(), {}), mc_)));
    return std::make_unique<experts::ResidentExperts>(*backend_, *indexes_.back(), mc_, [](int64_t, int64_t) { return true; });
  }
  // The MoE output of layer 1 for a few tokens routed to every expert.
  std::vector<float> output(experts::ExpertStore& store) {
    LocalMoeLayer layer(*backend_, store, mc_.hidden_size, mc_.num_experts);
    const int64_t T = 4;
    router::RoutingDecision r = router::RoutingDecision::empty(T, 2);
    for (int64_t s = 0; s < T * 2; ++s) {
      r.expert[s] = static_cast<int32_t>(s % mc_.num_experts);
      r.weight[s] = 0.5f;
    }
    const auto x = convert::synth_tensor(3, "x", T * mc_.hidden_size, 1.0f);
    std::vector<float> out(static_cast<std::size_t>(T * mc_.hidden_size));
    layer.start(1, 0, x.data(), T, r);
    layer.finish(0, out.data());
    return out;
  }
  void write_control(const std::string& text) {
    const fs::path tmp = dir_ / "control.tmp";
    std::ofstream(tmp) << text;
    fs::rename(tmp, dir_ / "control.json");  // as an operator should: atomically
  }
  static std::string all_of(const std::string& model) {
    return R"({"swaps": [{"shard": ")" + model + R"(/experts-00000.h5", "experts": "all"}, {"shard": ")" + model +
           R"(/experts-00001.h5", "experts": "all"}]})";
  }

  fs::path dir_;
  model::ModelConfig mc_;
  Matmul mm_;
  std::unique_ptr<experts::ExpertBackend> backend_;
  std::vector<std::unique_ptr<io::ExpertShardIndex>> indexes_;
};

TEST_F(HotSwapTest, ControlFileAtStartIsAppliedBeforeTheFirstStep) {
  auto a = store_of("a");
  auto b = store_of("b");
  const auto before = output(*a), want = output(*b);
  ASSERT_NE(before, want);
  write_control(all_of("b"));
  HotSwap swap((dir_ / "control.json").string(), mc_, {}, true);
  swap.start(*a);
  EXPECT_EQ(output(*a), want);  // bit for bit the new model's experts
  EXPECT_EQ(swap.counters().applied, 1);
  EXPECT_EQ(swap.counters().experts, mc_.num_layers * mc_.num_experts);
  EXPECT_EQ(swap.counters().failed, 0);
  swap.poll(*a);  // unchanged: nothing more
  EXPECT_EQ(swap.counters().applied, 1);
}

TEST_F(HotSwapTest, ChangedControlFileIsAppliedAtALaterStepBoundary) {
  auto a = store_of("a");
  const auto original = output(*a);
  HotSwap swap((dir_ / "control.json").string(), mc_, {}, true);
  swap.start(*a);  // no control file yet
  EXPECT_EQ(swap.counters().applied, 0);
  write_control(all_of("b"));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (swap.counters().applied == 0 && std::chrono::steady_clock::now() < deadline) {
    swap.poll(*a);  // a step boundary
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(swap.counters().applied, 1);
  auto b = store_of("b");
  EXPECT_EQ(output(*a), output(*b));
  EXPECT_NE(output(*a), original);
}

TEST_F(HotSwapTest, ABadControlFileChangesNothing) {
  auto a = store_of("a");
  const auto original = output(*a);
  write_control(R"({"swaps": [{"shard": "b/experts-00000.h5", "experts": "all"}, {"shard": "no-such-shard.h5", "experts": "all"}]})");
  HotSwap swap((dir_ / "control.json").string(), mc_, {}, true);
  swap.start(*a);
  EXPECT_EQ(swap.counters().failed, 1);
  EXPECT_EQ(swap.counters().applied, 0);
  EXPECT_EQ(output(*a), original);  // not even the good shard's experts
}

}  // namespace
}  // namespace moerun::runtime

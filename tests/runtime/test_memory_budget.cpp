// The memory budget (issue 41): how a rank divides it, checked against sums worked out by hand; the
// cgroup limit as read from stand-in cgroup trees in a temp dir; the KV rows the scheduler reserves.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "base/host.hpp"
#include "runtime/memory_budget.hpp"
#include "runtime/scheduler.hpp"

namespace moerun::runtime {
namespace {

constexpr int64_t MiB = int64_t{1} << 20;

// Budget 1000 MiB: margin 40 MiB + 5% = 90 MiB; held 300 and reserved 100 leave 510 MiB for experts.
ExpertMemoryNeeds needs(int64_t owned) {
  ExpertMemoryNeeds n;
  n.held = 300 * MiB;
  n.reserved = 100 * MiB;
  n.cache_reserved = 30 * MiB;
  n.expert_bytes = 10 * MiB;
  n.owned_experts = owned;
  n.min_slots = 8;
  return n;
}

TEST(MemoryBudget, MarginIsFortyMebibytesAndFivePercent) {
  EXPECT_EQ(budget_margin_bytes(1000 * MiB), 40 * MiB + 50 * MiB);
}

// Per loader two experts and 2 MiB, and one expert more for a load handed to the waiting thread.
TEST(MemoryBudget, LoadersHoldTwoExpertsAndTwoMebibytesEachAndOneMore) {
  EXPECT_EQ(cache_loader_bytes(1, 3 * MiB), 11 * MiB);
  EXPECT_EQ(cache_loader_bytes(4, 3 * MiB), 35 * MiB);
}

// A budget above what the host allows (the cgroup limit or MemAvailable) would be OOM-killed
// silently: it is clamped, with the warning saying both numbers; one below is taken as it is.
TEST(MemoryBudget, AnExplicitBudgetAboveTheHostIsClamped) {
  const MemoryBudget host = default_memory_budget(1);
  ASSERT_GT(host.bytes, 0);
  const MemoryBudget big = resolve_memory_budget(int64_t{1} << 60, 1);
  EXPECT_NEAR(static_cast<double>(big.bytes), static_cast<double>(host.bytes), 64.0 * MiB);  // MemAvailable moves
  EXPECT_NE(big.clamped_from.find("--memory-budget 1099511627776 MiB is more than " + host.source + " allows"), std::string::npos)
      << big.clamped_from;
  const MemoryBudget small = resolve_memory_budget(64 * MiB, 1);
  EXPECT_EQ(small.bytes, 64 * MiB);
  EXPECT_EQ(small.source, "--memory-budget");
  EXPECT_TRUE(small.clamped_from.empty());
  EXPECT_NEAR(static_cast<double>(resolve_memory_budget(0, 1).bytes), static_cast<double>(host.bytes), 64.0 * MiB);  // auto
}

// Logit rows: a sixteenth of the budget over the row's bytes (vocab x 4 x copies), within [floor, rows].
TEST(MemoryBudget, LogitRowsTakeASixteenthOfTheBudget) {
  const MemoryBudget b{160 * MiB, "test"};
  EXPECT_EQ(logit_rows_cap(b, 32768, 1024, 1, 9), 80);  // 10 MiB / 128 KiB
  EXPECT_EQ(logit_rows_cap(b, 32768, 1024, 2, 9), 40);
  EXPECT_EQ(logit_rows_cap(b, 32768, 50, 1, 9), 50);  // fewer rows than the cap: all of them
  EXPECT_EQ(logit_rows_cap(b, 1 << 24, 1024, 1, 9), 9);  // never below the floor
  EXPECT_EQ(logit_rows_cap({0, "none"}, 32768, 1024, 1, 9), 0);  // no budget: no cap
}

TEST(MemoryBudget, ExpertsThatFitStayResident) {
  const ExpertMemory m = split_for_experts({1000 * MiB, "test"}, needs(51));  // 510 MiB exactly
  EXPECT_TRUE(m.resident);
  EXPECT_EQ(m.room, 510 * MiB);
}

TEST(MemoryBudget, TheRestGoesToL1LessTheCacheThreads) {
  const ExpertMemory m = split_for_experts({1000 * MiB, "test"}, needs(52));  // one too many
  EXPECT_FALSE(m.resident);
  EXPECT_EQ(m.l1_bytes, 48 * 10 * MiB);  // (510 - 30) / 10 slots
}

TEST(MemoryBudget, TooSmallForOneTokensExpertsIsAUsageErrorNamingTheParts) {
  ExpertMemoryNeeds n = needs(100);
  n.held = 700 * MiB;  // leaves 110 - 30 = 80 MiB: 8 slots, just enough
  EXPECT_EQ(split_for_experts({1000 * MiB, "test"}, n).l1_bytes, 80 * MiB);
  n.held += 1;
  try {
    split_for_experts({1000 * MiB, "the cgroup memory limit"}, n);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    const std::string m = e.what();
    for (const char* part : {"the memory budget 1000 MiB (the cgroup memory limit) is too small", "holds 700 MiB", "reserves 130 MiB",
                             "90 MiB of margin", "at least 8 experts of 10240 KiB"})
      EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
  }
}

// vocab 10, d 64, one MoE layer (2 heads of 32, 1 KV head, 2 experts), bf16: 13,888 parameters
// (embedding and LM head 640 each, final norm 64, attention 12,288 + 2 norms of 64, gate 128). Held:
// the matrices in bf16 (27,136 bytes), the 3 norms and the gate widened to float32 (1,280 bytes).
TEST(MemoryBudget, DenseResidentBytes) {
  model::ModelConfig c;
  c.vocab_size = 10;
  c.hidden_size = 64;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 32;
  c.intermediate_size = 32;
  c.num_experts = 2;
  c.top_k = 1;
  c.max_position = 16;
  c.dtype = DType::BF16;
  ASSERT_EQ(c.dense_params(), 13888);
  EXPECT_EQ(dense_resident_bytes(c, WeightScheme::Plain, false), 28416);
  EXPECT_EQ(dense_resident_bytes(c, WeightScheme::Plain, true), 28416 - 1280);  // the table is mapped
  // q4 rows of 64: 32 bytes of values + 4 fp16 (scale and minimum of 2 groups) = 40 bytes. The LM head
  // 1280 -> 400 bytes, the attention's 192 rows 24,576 -> 7,680 bytes.
  EXPECT_EQ(dense_resident_bytes(c, WeightScheme::Q4, true), 28416 - 1280 - 880 - 16896);
}

TEST(MemoryBudget, NoBudgetKnownKeepsExpertsResident) {
  EXPECT_TRUE(split_for_experts({0, ""}, needs(1000000)).resident);
}

TEST(MemoryBudget, DenseBeyondTheBudgetIsAUsageErrorNamingTheFile) {
  try {
    check_dense_fits({64 * MiB, "--memory-budget"}, 200 * MiB, "m/model.h5");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("m/model.h5: the dense weights need 200 MiB"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(check_dense_fits({int64_t{64} << 30, "--memory-budget"}, 200 * MiB, "m/model.h5"));
}

// Stand-in cgroup trees in a temp dir: the tightest limit of the group and its ancestors counts.
class CgroupLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    root = std::filesystem::temp_directory_path() / ("moerun-cgroup-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root);
  }
  void TearDown() override { std::filesystem::remove_all(root); }
  void put(const std::string& rel, const std::string& text) {
    const std::filesystem::path p = root / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::filesystem::path root;
};

TEST_F(CgroupLimit, V1TakesTheTightestAncestor) {
  put("memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "unlimited"
  put("memory/jobs/memory.limit_in_bytes", "1073741824\n");
  put("memory/jobs/run7/memory.limit_in_bytes", "2147483648\n");
  EXPECT_EQ(cgroup_memory_limit_bytes("5:cpu:/\n4:memory:/jobs/run7\n", root), int64_t{1} << 30);
  EXPECT_EQ(cgroup_memory_limit_bytes("4:cpuacct,memory:/jobs/run7\n", root), int64_t{1} << 30);
  EXPECT_EQ(cgroup_memory_limit_bytes("4:memory:/\n", root), 0);
}

TEST_F(CgroupLimit, V2ReadsMemoryMax) {
  put("unified/user/memory.max", "max\n");
  put("unified/user/job/memory.max", "536870912\n");
  EXPECT_EQ(cgroup_memory_limit_bytes("0::/user/job\n", root), int64_t{512} << 20);
  EXPECT_EQ(cgroup_memory_limit_bytes("0::/user\n", root), 0);
  EXPECT_EQ(cgroup_memory_limit_bytes("", root), 0);
}

TEST(HostMemory, ResidentAndAvailableAreReadFromProc) {
  EXPECT_GT(resident_memory_bytes(), 0);
  EXPECT_GT(available_memory_bytes(), 0);
  EXPECT_LE(available_memory_bytes(), host_memory_bytes());
}

// The longest max_batch_size requests (prompt + budget, capped at max_position) are what the KV
// cache can hold at once.
TEST(MaxKvTokens, LongestRequestsInFlight) {
  std::vector<io::Request> r(4);
  const int64_t prompt[] = {10, 50, 30, 90}, budget[] = {5, 5, 20, 40};
  for (std::size_t i = 0; i < r.size(); ++i) {
    r[i].prompt_tokens.assign(static_cast<std::size_t>(prompt[i]), 1);
    r[i].max_new_tokens = budget[i];
  }
  SchedulerConfig c;
  c.max_batch_size = 2;
  EXPECT_EQ(max_kv_tokens(r, c, 100), 100 + 55);  // 130 capped at 100, then 55
  c.max_batch_size = 8;
  EXPECT_EQ(max_kv_tokens(r, c, 1000), 15 + 55 + 50 + 130);
  EXPECT_EQ(max_sequences_in_flight(r, c), 4);  // no more than there are requests
  c.max_batch_size = 1;
  c.batching = Batching::MinHash;  // parks up to 4 x max_batch_size prefilled sequences
  EXPECT_EQ(max_kv_tokens(r, c, 1000), 15 + 55 + 50 + 130);
  EXPECT_EQ(max_sequences_in_flight(r, c), 4);
}

// A hybrid model reserves each sequence's recurrent state (3 linear layers of 2 value heads of 4 x 4
// floats and a conv state of 3 x 16 channels: 4 x (32 + 48) = 320 bytes a layer) and K/V rows only for
// its attention layer (2 x 8 floats a position).
TEST(MemoryBudget, HybridModelsReserveRecurrentStatePerSequence) {
  model::ModelConfig c;
  c.vocab_size = 10;
  c.hidden_size = 16;
  c.num_layers = 4;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.intermediate_size = 8;
  c.num_experts = 2;
  c.top_k = 1;
  c.max_position = 64;
  c.layer_attention = {model::AttentionKind::Linear, model::AttentionKind::Linear, model::AttentionKind::Linear,
                       model::AttentionKind::Full};
  c.linear = {.k_heads = 1, .v_heads = 2, .k_dim = 4, .v_dim = 4, .conv_kernel = 4};
  ASSERT_EQ(c.linear.state_bytes(), 320);
  const int64_t base = reserved_bytes(c, 8, 0, 0, false);
  EXPECT_EQ(reserved_bytes(c, 8, 100, 0, false) - base, 100 * 16 * 4);  // one attention layer's K and V rows
  EXPECT_EQ(reserved_bytes(c, 8, 0, 5, false) - base, 5 * 3 * 320);
}

}  // namespace
}  // namespace moerun::runtime

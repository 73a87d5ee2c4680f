// `inspect`'s memory and traffic arithmetic against numbers worked out by hand (in the comments)
// for two configurations of a tiny model: one process, and 2 nodes x 3 ranks.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "runtime/memory_plan.hpp"

#include <string>

namespace moerun::runtime {
namespace {

// vocab 10, d 4, 1 layer, 2 heads / 1 KV head of dim 2 (q 4, kv 2), ff 6, 2 experts, top-1, fp32.
model::ModelConfig tiny() {
  model::ModelConfig c;
  c.vocab_size = 10;
  c.hidden_size = 4;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.intermediate_size = 6;
  c.num_experts = 2;
  c.top_k = 1;
  c.max_position = 8;
  return c;
}

// One sequence of 8 positions, 4 tokens per step, no margin.
MemoryPlanConfig small_job() {
  MemoryPlanConfig p;
  p.batch = 1;
  p.context = 8;
  p.max_batch_tokens = 4;
  p.margin = 0;
  return p;
}

// A dense layer: its MLP is a dense weight on the router, its scratch an activation there, and
// the experts are the MoE layers' only.
TEST(MemoryPlan, DenseLayersAreRouterWeights) {
  const MemoryPlanConfig p = small_job();
  model::ModelConfig c = tiny();
  c.num_layers = 2;
  const MemoryPlan moe = plan_memory(c, p);
  c.layer_mlp = {model::MlpKind::Dense, model::MlpKind::Moe};
  c.dense_intermediate_size = 5;
  const MemoryPlan dense = plan_memory(c, p);
  EXPECT_EQ(dense.dense_bytes - moe.dense_bytes, (3 * 5 * 4 - 2 * 4) * 4);  // + w1, w3, w2; - a gate [2, 4]
  EXPECT_EQ(dense.activation_bytes - moe.activation_bytes, 4 * 4 * 3 * 5);
  EXPECT_EQ(dense.experts_per_rank, moe.experts_per_rank / 2);
}

TEST(MemoryPlan, OneProcess) {
  const MemoryPlanConfig p = small_job();
  const MemoryPlan m = plan_memory(tiny(), p);
  // fp32: embed 40 + final norm 4 + per layer (2 norms 8 + gate 8) = 60 elems = 240 B;
  // stored: lm_head 40 + wq 16 + wk 8 + wv 8 + wo 16 = 88 elems = 352 B.
  EXPECT_EQ(m.dense_bytes, 592);
  EXPECT_EQ(m.kv_bytes, 128);  // 8 positions x (1 layer x K,V x 1 head x 2 x 4 B)
  EXPECT_EQ(m.activation_bytes, 520);  // 4 B x 4 tokens x (16 + 8 + 4 + 2) + 4 B x 1 x 10
  EXPECT_EQ(m.experts_per_rank, 2);
  EXPECT_EQ(m.expert_weight_bytes, 576);  // 2 x 3 x 4 x 6 x 4 B
  EXPECT_EQ(m.expert_scratch_bytes, 416);  // 4 B x 4 x 1 x (8 + 18)
  EXPECT_EQ(m.expert_rank_bytes, 992);
  EXPECT_EQ(m.router_bytes, 1240 + 992);  // one process holds both
  EXPECT_EQ(m.flat_messages_per_step, 0);
}

// With device bytes, inspect says how many sequences of the context fit beside the rest: (room / (1 +
// margin) - dense 592 - activations 520) / 128 B a sequence, here (2000 - 1112) / 128 = 6.
TEST(MemoryPlan, SequencesThatFitTheDevice) {
  MemoryPlanConfig p = small_job();
  p.device_bytes = 2000;
  const std::string report = inspect_report(tiny(), p, "tiny");
  EXPECT_NE(report.find("KV cache         0.12 KiB (0.12 KiB a sequence: 6 sequences of this context fit"), std::string::npos) << report;
}

// 2 nodes x 3 ranks (a router and 2 expert ranks each), one sequence of 8, 4 tokens a step, 50% margin.
MemoryPlanConfig two_nodes_of_three() {
  MemoryPlanConfig p;
  p.batch = 1;
  p.context = 8;
  p.max_batch_tokens = 4;
  p.micro_batches = 2;
  p.nodes = 2;
  p.ranks_per_node = 3;
  p.routers_per_node = 1;
  p.margin = 0.5;
  return p;
}

TEST(MemoryPlan, TwoNodesOfThree) {
  MemoryPlanConfig p = two_nodes_of_three();
  p.device_bytes = 1000;
  const MemoryPlan m = plan_memory(tiny(), p);
  EXPECT_EQ(m.routers, 2);
  EXPECT_EQ(m.expert_ranks, 4);
  EXPECT_EQ(m.experts_per_rank, 1);  // ceil(2 / 4)
  EXPECT_EQ(m.router_exchange_bytes, 144);  // 4 tokens x 1 slot x (20 B out + 16 B back)
  EXPECT_EQ(m.router_bytes, 1384 + 692);  // 592 + 128 + 520 + 144, plus 50%
  EXPECT_EQ(m.expert_exchange_bytes, 72);  // ceil(2 routers x 4 x 1 / 4) = 2 rows x 36 B
  EXPECT_EQ(m.expert_rank_bytes, 776 + 388);  // 288 + 416 + 72, plus 50%
  EXPECT_FALSE(m.router_fits);
  EXPECT_FALSE(m.expert_fits);
  EXPECT_DOUBLE_EQ(m.cross_node_bytes_per_token, 18.0);  // 36 B x (1 remote node of 2)
  // One sequence a router: a step is one chunk, so one micro-batch of the 2.
  EXPECT_EQ(m.flat_messages_per_step, 8);  // 2 directions x 1 mb x 2 routers x 1 node x 2 expert ranks
  EXPECT_EQ(m.hier_messages_per_step, 4);  // 2 directions x 1 mb x 2 node pairs
  p.batch = 2;
  const MemoryPlan two = plan_memory(tiny(), p);
  EXPECT_EQ(two.flat_messages_per_step, 16);  // 2 mb
  EXPECT_EQ(two.hier_messages_per_step, 8);
}

// A node's ranks together, and the fewest nodes whose memory holds every expert.
TEST(MemoryPlan, NodesNeeded) {
  MemoryPlanConfig p = two_nodes_of_three();
  p.node_bytes = 4404;  // TwoNodesOfThree's router (2076) and its 2 expert ranks (1164 each)
  EXPECT_EQ(plan_memory(tiny(), p).node_total_bytes, 4404);
  EXPECT_TRUE(plan_memory(tiny(), p).node_fits);
  p.node_bytes = 4403;
  EXPECT_FALSE(plan_memory(tiny(), p).node_fits);
  // 64 experts of 288 B: ceil(64 / 2K) a rank on K nodes of 1 router + 2 expert ranks. A node then
  // holds 2 x 1.5 x 288 x ceil(32 / K) B of weights besides the rest: more nodes, less each.
  model::ModelConfig c = tiny();
  c.num_experts = 64;
  p.nodes = 1;
  const int64_t one = plan_memory(c, p).node_total_bytes;
  p.nodes = 4;
  const int64_t four = plan_memory(c, p).node_total_bytes;
  EXPECT_EQ(one - four, 2 * 432 * (32 - 8));  // the expert weights (and their margin) only
  p.node_bytes = four;
  EXPECT_EQ(nodes_needed(c, p), 4);
  p.node_bytes = four - 1;
  EXPECT_EQ(nodes_needed(c, p), 5);
  p.node_bytes = 100;  // not even a router rank
  EXPECT_EQ(nodes_needed(c, p), 0);
  p.ranks_per_node = 1;
  p.routers_per_node = 1;
  p.node_bytes = four;
  EXPECT_EQ(nodes_needed(c, p), 0) << "a node of one rank has no expert rank to spread over";
}

TEST(MemoryPlan, LayoutWithoutExpertRanksIsAUsageError) {
  MemoryPlanConfig p;
  p.nodes = 2;
  p.ranks_per_node = 1;
  EXPECT_THROW(plan_memory(tiny(), p), Error);
}

}  // namespace
}  // namespace moerun::runtime

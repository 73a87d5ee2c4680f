// Memory plan of a model (`moerun inspect`): parameter counts, bytes per expert, and the memory a
// router rank and an expert rank need for a given batch, context and number of experts held.
#pragma once
#include <cstdint>
#include <string>

#include "model/model_config.hpp"

namespace moerun::runtime {

struct MemoryPlanConfig {
  int64_t batch = 32;  // sequences in flight on a router rank
  int64_t context = 0;  // tokens per sequence (0: max_position)
  int64_t experts_per_rank = 0;  // experts an expert rank holds (0: from the layout)
  int64_t max_batch_tokens = 1024;
  int64_t micro_batches = 2;
  // Layout: nodes x ranks_per_node ranks, the first routers_per_node of each node routers.
  // ranks_per_node 1 and nodes 1: one process holding everything.
  int64_t nodes = 1;
  int64_t ranks_per_node = 1;
  int64_t routers_per_node = 1;
  int64_t device_bytes = 0;  // memory per rank to check against (0: no check)
  int64_t node_bytes = 0;  // memory per node to check the node's ranks against (0: no check)
  double margin = 0.10;  // safety margin on top of the sum
  int64_t packed_bytes_per_expert = 0;  // an expert in memory, packed for this machine (0: as stored)
  void validate() const;  // Usage errors naming the option
};

// Bytes, all per rank unless said otherwise.
struct MemoryPlan {
  int64_t routers = 1, expert_ranks = 1, experts_per_rank = 0;
  int64_t dense_bytes = 0;  // model.h5 in memory (embeddings/norms/gate as fp32)
  int64_t kv_bytes = 0;  // KV cache at batch x context
  int64_t activation_bytes = 0;  // step buffers on a router rank
  int64_t router_exchange_bytes = 0;  // dispatch records out + results back, one full step
  int64_t router_margin_bytes = 0;
  int64_t router_bytes = 0;  // total with margin
  int64_t expert_weight_bytes = 0;
  int64_t expert_scratch_bytes = 0;
  int64_t expert_exchange_bytes = 0;  // rows in + results out, its share of a full step of every router
  int64_t expert_margin_bytes = 0;
  int64_t expert_rank_bytes = 0;  // total with margin
  bool router_fits = true, expert_fits = true;
  // A node's ranks together: its routers and its expert ranks (node_bytes given: whether they fit).
  int64_t node_total_bytes = 0;
  bool node_fits = true;
  // Traffic per token between nodes (uniform placement): bytes out and back, the same for the flat
  // and the hierarchical exchange (no node-level dedup of a token's rows yet)...
  double cross_node_bytes_per_token = 0;
  // ...and the messages that cross node boundaries per step (dispatch + combine, all micro-batches).
  int64_t flat_messages_per_step = 0;
  int64_t hier_messages_per_step = 0;
};

MemoryPlan plan_memory(const model::ModelConfig& c, const MemoryPlanConfig& p);
// The fewest nodes of p's ranks per node whose memory (p.node_bytes each) holds the model with every
// expert resident: no expert read from disk while it runs. 0 when no count up to 4096 does (a
// router rank alone, or the experts' scratch, exceeds a node).
int64_t nodes_needed(const model::ModelConfig& c, const MemoryPlanConfig& p);
std::string inspect_report(const model::ModelConfig& c, const MemoryPlanConfig& p, const std::string& model_dir);

}  // namespace moerun::runtime

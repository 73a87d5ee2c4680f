// Planning a placement from measured expert loads (issue 27): replicate the hottest experts into
// `redundant` extra slots per layer, then pack experts and replicas onto the expert ranks, nodes
// first and then ranks, so that the busiest rank's expected rows are as few as possible. This is
// the hierarchical policy of DeepSeek's Expert Parallelism Load Balancer (EPLB,
// github.com/deepseek-ai/EPLB, eplb.py: rebalance_experts_hierarchical), written from its
// description:
//   1. whole expert groups (DeepSeek's router groups; else single experts) are packed onto nodes,
//      the same number per node, heaviest first onto the lightest node;
//   2. within each node, each extra slot goes to the expert with the most rows per copy;
//   3. the node's copies (rows split evenly among an expert's copies) are packed onto its ranks,
//      heaviest first onto the lightest rank with a free slot that holds no copy of that expert.
// A node count that does not divide the groups (or nodes whose slots cannot take an equal share)
// uses one pool of every expert rank, as EPLB's global policy does. Without router groups (each
// expert its own group) so does a layer whose busiest rank the global pool makes more than 2%
// lighter (equal experts per node cannot spread one very hot expert; replicas on other nodes can).
// After the greedy packing, which assumes an expert's rows split evenly over its copies, a local
// search moves or swaps copies off the busiest rank while that lowers it, as the routers will
// split the rows. Differences from EPLB: a rank
// never holds two copies of one expert, ranks may hold one slot more than others (the extra slots
// rotate over ranks from layer to layer, so totals stay even), and the memory limit is a hard cap
// on the experts a rank holds over all layers (fewer extra slots, or an error).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/topology.hpp"
#include "experts/placement.hpp"
#include "io/routing_trace.hpp"

namespace moerun::experts {

// Rows routed to each (layer, expert): from routing traces, or counted live by the routers.
struct ExpertLoads {
  int64_t num_layers = 0;
  int64_t num_experts = 0;
  std::vector<int64_t> rows;  // [layer * num_experts + expert]

  int64_t at(int64_t layer, int64_t expert) const { return rows[static_cast<std::size_t>(layer * num_experts + expert)]; }
  int64_t total() const;
};

// Every token's slots of every trace (all must agree on layers and experts: BadInput naming the file).
ExpertLoads loads_from_traces(const std::vector<io::RoutingTrace>& traces, const std::vector<std::string>& names);

struct PlacementPlanConfig {
  int64_t redundant = 0;  // extra expert slots per layer, for replicas of the hottest
  int64_t max_experts_per_rank = 0;  // what one rank's memory holds, over all layers (0: no limit)
  int64_t groups = 0;  // router groups kept on one node (experts g*E/groups...); 0 or 1: none
  void validate() const;  // ConfigError naming the field
};

struct PlacementPlan {
  Placement placement;
  int64_t redundant = 0;  // extra slots per layer used (fewer than asked when memory or copies ran out)
  int64_t hierarchical_layers = 0;  // layers placed nodes first (the others: one pool of every expert rank)
};

// Usage error when the experts cannot fit (max_experts_per_rank below an even share).
PlacementPlan plan_placement(const ExpertLoads& loads, const comm::Topology& topo, const PlacementPlanConfig& cfg);

// Expected rows per expert rank in each layer under `p`, replicated experts split as the routers
// split them (experts/replica_split, with `granule`).
struct LayerBalance {
  std::vector<int64_t> rank_rows;  // [index in topo.experts]
  int64_t max_rows = 0;
  double mean_rows = 0;
  double imbalance() const { return mean_rows > 0 ? static_cast<double>(max_rows) / mean_rows : 1.0; }
};
std::vector<LayerBalance> expected_balance(const Placement& p, const ExpertLoads& loads, const comm::Topology& topo, int64_t granule);
// Sum of the layers' busiest rank over the sum of their means.
double overall_imbalance(const std::vector<LayerBalance>& layers);

}  // namespace moerun::experts

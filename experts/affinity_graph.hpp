// Building the expert-affinity graph from routing traces, and predicting from it which experts a
// layer will need given the experts the previous layer used (DESIGN §5).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/affinity_file.hpp"
#include "io/routing_trace.hpp"

namespace moerun::experts {

// Counts over every token of every trace (all must agree on layers, experts and top-k; BadInput
// naming the file otherwise), normalised to conditional probabilities.
io::AffinityGraph build_affinity_graph(const std::vector<io::RoutingTrace>& traces, const std::vector<std::string>& names);

struct AffinityEdge {
  std::string kind;  // "next" (layer l -> l+1) or "coactivation" (within layer l)
  int64_t layer = 0, from = 0, to = 0;
  int64_t count = 0;
  double probability = 0;
};
// The `n` strongest edges by probability (ties: more tokens first), each with at least min_count tokens.
std::vector<AffinityEdge> strongest_edges(const io::AffinityGraph& g, int n, int64_t min_count);

// Expected share of layer `next_layer`'s tokens on each expert, given how many rows each expert of
// the previous layer received (`rows_prev[e]`). Layer 0 (no previous layer within a step) and
// rows with no evidence fall back to the layer's marginal frequency.
std::vector<double> predict_next_layer(const io::AffinityGraph& g, int64_t next_layer, const std::vector<int64_t>& rows_prev);

}  // namespace moerun::experts

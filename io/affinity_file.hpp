// Expert-affinity graph file (`moerun affinity build`, DESIGN §5), HDF5:
//   attrs: format="moe-affinity", format_version=1, num_layers, num_experts, top_k, tokens
//   /next_counts [L-1, E, E] int64   tokens choosing expert i at layer l and j at layer l+1
//   /next        [L-1, E, E] float64 P(j at l+1 | i at l) (rows with no tokens: 0)
//   /coactivation_counts [L, E, E] int64   tokens with both i and j in their top-k at layer l (i != j)
//   /coactivation        [L, E, E] float64 P(j in top-k | i in top-k) at layer l
//   /frequency   [L, E] float64 share of tokens with expert e in their top-k at layer l
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moerun::io {

struct AffinityGraph {
  int64_t num_layers = 0, num_experts = 0, top_k = 0, tokens = 0;
  std::vector<int64_t> next_counts, coactivation_counts;  // row-major as above
  std::vector<double> next, coactivation, frequency;
  std::string source;  // the file it was read from (for messages); empty when built in memory

  double p_next(int64_t l, int64_t i, int64_t j) const { return next[static_cast<std::size_t>((l * num_experts + i) * num_experts + j)]; }
  double freq(int64_t l, int64_t e) const { return frequency[static_cast<std::size_t>(l * num_experts + e)]; }
};

void write_affinity_graph(const std::string& path, const AffinityGraph& g);  // atomically
AffinityGraph read_affinity_graph(const std::string& path);  // BadInput naming the field

}  // namespace moerun::io

// Placement: (layer, expert) -> owning expert rank (DESIGN §1). `round-robin` deals the flattened
// (layer, expert) pairs over the expert ranks in order; a JSON file {"layer": {"expert": rank}} places
// them explicitly (validated: every expert placed, only on expert ranks). Every rank computes it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/topology.hpp"

namespace moerun::experts {

struct Placement {
  int64_t num_layers = 0;
  int64_t num_experts = 0;
  std::vector<int> owner;  // [layer * num_experts + expert] world rank

  int owner_of(int64_t layer, int64_t expert) const { return owner[static_cast<std::size_t>(layer * num_experts + expert)]; }
  int64_t count_on(int rank) const;
  std::string describe() const;  // per expert rank: the experts it owns
};

Placement round_robin_placement(int64_t layers, int64_t experts, const comm::Topology& topo);
// BadInput naming the file and the offending entry.
Placement placement_from_json(const std::string& path, int64_t layers, int64_t experts, const comm::Topology& topo);
// "round-robin" or a path to a JSON file.
Placement make_placement(const std::string& policy, int64_t layers, int64_t experts, const comm::Topology& topo);

}  // namespace moerun::experts

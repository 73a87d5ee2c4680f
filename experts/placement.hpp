// Placement: (layer, expert) -> the expert ranks holding it (DESIGN §1). One rank for most experts;
// a hot expert may have replicas, among which the routers split its rows (experts/replica_split).
// `round-robin` deals the flattened (layer, expert) pairs over the expert ranks in order; a JSON
// file {"layer": {"expert": rank | [rank, ...]}} places them explicitly (validated: every expert
// placed, only on expert ranks, no rank twice for one expert). `moerun placement plan` writes such
// a file from routing traces (experts/placement_plan). Every rank computes the same placement.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "comm/topology.hpp"

namespace moerun::experts {

struct Placement {
  int64_t num_layers = 0;
  int64_t num_experts = 0;
  // [layer * num_experts + expert]: world ranks holding it, in the order its rows are split among them.
  std::vector<std::vector<int>> holders;

  const std::vector<int>& holders_of(int64_t layer, int64_t expert) const {
    return holders[static_cast<std::size_t>(layer * num_experts + expert)];
  }
  int owner_of(int64_t layer, int64_t expert) const { return holders_of(layer, expert).front(); }
  bool holds(int rank, int64_t layer, int64_t expert) const;
  bool has_replicas(int64_t layer) const;  // an expert of `layer` with more than one holder
  int64_t replicas() const;  // holders beyond the first, over every layer
  int64_t count_on(int rank) const;  // (layer, expert) pairs the rank holds
  std::string describe() const;  // per expert rank: the experts it holds (replicas marked *)
  std::string to_json() const;  // the placement file's form
  bool operator==(const Placement&) const = default;
};

Placement round_robin_placement(int64_t layers, int64_t experts, const comm::Topology& topo);
// BadInput naming the file and the offending entry.
Placement placement_from_json(const std::string& path, int64_t layers, int64_t experts, const comm::Topology& topo);
// "round-robin" or a path to a JSON file.
Placement make_placement(const std::string& policy, int64_t layers, int64_t experts, const comm::Topology& topo);

}  // namespace moerun::experts

// Topology and roles (DESIGN §1, §4): which node each rank is on, its local rank, and whether it is
// a router rank (the first --routers-per-node local ranks of each node) or an expert rank. Every
// rank computes the same table.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

namespace moerun::comm {

enum class Role { Router, Expert, Both };

struct RankInfo {
  int rank = 0;
  int node = 0;
  int local_rank = 0;
  Role role = Role::Both;
};

struct Topology {
  int world_size = 1;
  int nodes = 1;
  std::vector<RankInfo> ranks;  // [world rank]
  std::vector<int> routers;  // world ranks of router ranks, in order
  std::vector<int> experts;  // world ranks of expert ranks, in order

  const RankInfo& self(int rank) const { return ranks[static_cast<std::size_t>(rank)]; }
  bool is_router(int rank) const { return ranks[static_cast<std::size_t>(rank)].role != Role::Expert; }
  bool is_expert(int rank) const { return ranks[static_cast<std::size_t>(rank)].role != Role::Router; }
  int router_index(int rank) const;  // position in `routers`, -1 if not a router
  std::string describe() const;  // the start-up layout table
};

// Builds the topology over `comm`: nodes from MPI_Comm_split_type(SHARED) unless ranks_per_node > 0
// (then rank / ranks_per_node), numbered in the order of their lowest rank. routers_per_node 0:
// nodes only, every rank plays both roles (transports and their benchmarks). router_nodes N > 0:
// only the first N nodes have routers, every rank of the others is an expert rank (a router node
// apart from the nodes that hold the experts). Usage error (exit 2) when no expert rank would exist,
// routers exceed the ranks of a node or router_nodes the nodes; the message says what would work.
Topology build_topology(MPI_Comm comm, int routers_per_node, int ranks_per_node, int router_nodes = 0);

// Ranks sharing this host's memory (MPI_COMM_TYPE_SHARED), whatever --ranks-per-node says.
int ranks_on_this_host(MPI_Comm comm);
// Collective over `comm`: the values of the ranks sharing this host, in their order; giving up
// after timeout_s (> 0) with ErrorKind::Comm naming `what`.
std::vector<int64_t> allgather_on_this_host(int64_t value, MPI_Comm comm, double timeout_s, const std::string& what);

// The same from a list of node ids (pure; used by the above and by tests).
Topology topology_from_nodes(const std::vector<int>& node_of_rank, int routers_per_node, int router_nodes = 0);

}  // namespace moerun::comm

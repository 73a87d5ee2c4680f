// Topology construction.
#include "comm/topology.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "base/error.hpp"
#include "comm/collectives.hpp"
#include "comm/mpi.hpp"

namespace moerun::comm {

int Topology::router_index(int rank) const {
  auto it = std::find(routers.begin(), routers.end(), rank);
  return it == routers.end() ? -1 : static_cast<int>(it - routers.begin());
}

std::string Topology::describe() const {
  std::ostringstream os;
  os << "layout: " << world_size << " rank(s) on " << nodes << " node(s), " << routers.size() << " router(s), " << experts.size()
     << " expert rank(s)\n";
  for (const RankInfo& r : ranks)
    os << "  rank " << r.rank << ": node " << r.node << " local " << r.local_rank << " "
       << (r.role == Role::Router   ? "router"
           : r.role == Role::Expert ? "expert"
                                    : "router+expert")
       << "\n";
  return os.str();
}

Topology topology_from_nodes(const std::vector<int>& node_of_rank, int routers_per_node, int router_nodes) {
  Topology t;
  t.world_size = static_cast<int>(node_of_rank.size());
  std::map<int, int> next_local;
  for (int r = 0; r < t.world_size; ++r) {
    RankInfo info;
    info.rank = r;
    info.node = node_of_rank[static_cast<std::size_t>(r)];
    info.local_rank = next_local[info.node]++;
    t.ranks.push_back(info);
  }
  t.nodes = static_cast<int>(next_local.size());
  if (routers_per_node < 0) fail_config("routers_per_node", "must be >= 1");
  if (router_nodes < 0 || router_nodes > t.nodes)
    fail(ErrorKind::Usage, "--router-nodes ", router_nodes, " is not in [0, ", t.nodes, "]: the job has ", t.nodes,
         " node(s) (0: routers on every node)");
  if (t.world_size == 1 || routers_per_node == 0) {  // one rank, or a topology without roles
    for (RankInfo& r : t.ranks) {
      r.role = Role::Both;
      t.routers.push_back(r.rank);
      t.experts.push_back(r.rank);
    }
    return t;
  }
  auto router_node = [&](int node) { return router_nodes == 0 || node < router_nodes; };
  for (const auto& [node, count] : next_local)
    if (router_node(node) && routers_per_node > count)
      fail_config("routers_per_node", routers_per_node, " exceeds the ", count, " rank(s) of node ", node, "; use at most ", count - 1,
                  " router(s) per node (expert ranks need the rest) or more ranks per node");
  for (RankInfo& r : t.ranks) {
    r.role = router_node(r.node) && r.local_rank < routers_per_node ? Role::Router : Role::Expert;
    (r.role == Role::Router ? t.routers : t.experts).push_back(r.rank);
  }
  if (t.experts.empty())
    fail(ErrorKind::Usage, "no expert rank: ", t.world_size, " rank(s) with --routers-per-node ", routers_per_node,
         " are all routers; use more ranks per node than routers per node (e.g. -np ", t.world_size + t.nodes, ")");
  return t;
}

int ranks_on_this_host(MPI_Comm comm) {
  MPI_Comm shared;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
  int n = 1;
  MPI_CHECK(MPI_Comm_size(shared, &n));
  MPI_CHECK(MPI_Comm_free(&shared));
  return n;
}

std::vector<int64_t> allgather_on_this_host(int64_t value, MPI_Comm comm, double timeout_s, const std::string& what) {
  MPI_Comm shared;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
  std::vector<int64_t> all;
  try {
    all = allgather_timed({value}, shared, timeout_s, what);
  } catch (...) {
    MPI_Comm_free(&shared);
    throw;
  }
  MPI_CHECK(MPI_Comm_free(&shared));
  return all;
}

Topology build_topology(MPI_Comm comm, int routers_per_node, int ranks_per_node, int router_nodes) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  int node = 0;
  if (ranks_per_node > 0) {
    node = rank / ranks_per_node;
  } else {
    MPI_Comm shared;
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared));
    int leader = rank, shared_rank = 0;
    MPI_CHECK(MPI_Comm_rank(shared, &shared_rank));
    // Node id = lowest world rank on the node, broadcast from the node's first rank.
    MPI_CHECK(MPI_Bcast(&leader, 1, MPI_INT, 0, shared));
    MPI_CHECK(MPI_Comm_free(&shared));
    node = leader;
  }
  std::vector<int> nodes(static_cast<std::size_t>(size));
  MPI_CHECK(MPI_Allgather(&node, 1, MPI_INT, nodes.data(), 1, MPI_INT, comm));
  // Renumber node ids densely in order of first appearance.
  std::map<int, int> dense;
  for (int& n : nodes) {
    auto it = dense.find(n);
    if (it == dense.end()) it = dense.emplace(n, static_cast<int>(dense.size())).first;
    n = it->second;
  }
  return topology_from_nodes(nodes, routers_per_node, router_nodes);
}

}  // namespace moerun::comm

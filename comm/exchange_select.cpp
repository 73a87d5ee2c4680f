// All-to-all selection.
#include "comm/exchange_select.hpp"

#include <cstdlib>

#include "base/error.hpp"
#include "comm/hierarchical_alltoallv.hpp"
#include "comm/point_to_point.hpp"
#ifdef MOERUN_HAVE_UCX
#include "comm/ucx_transport.hpp"
#endif

namespace moerun::comm {

A2aKind parse_a2a(const std::string& name) {
  if (name == "mpi") return A2aKind::Mpi;
  if (name == "hier") return A2aKind::Hier;
  if (name == "auto") return A2aKind::Auto;
  fail(ErrorKind::Usage, "--a2a must be mpi, hier or auto, not \"", name, "\"");
}

const char* a2a_name(A2aKind kind) {
  switch (kind) {
    case A2aKind::Mpi: return "mpi";
    case A2aKind::Hier: return "hier";
    default: return "auto";
  }
}

A2aKind resolve_a2a(A2aKind requested, int nodes, int64_t bytes_per_rank) {
  if (requested != A2aKind::Auto) return requested;
  // One node: nothing to aggregate. Several: hierarchical up to kHierMaxBytesPerRank per rank.
  // Measured so far (docs/PERFORMANCE.md: 4 virtual nodes on one host, 2-3 network-namespace
  // hosts), hier never beat the flat exchange at any size, so the crossover is 0 until it does.
  constexpr int64_t kHierMaxBytesPerRank = 0;
  return nodes > 1 && bytes_per_rank <= kHierMaxBytesPerRank ? A2aKind::Hier : A2aKind::Mpi;
}

std::string internode_transport() {
  const char* v = std::getenv("MOERUN_INTERNODE");
  std::string t = v ? v : "";
#ifdef MOERUN_HAVE_UCX
  if (t.empty()) t = "ucx";
#else
  if (t.empty()) t = "mpi";
  if (t == "ucx") fail(ErrorKind::Usage, "MOERUN_INTERNODE=ucx, but this build has no UCX");
#endif
  if (t != "ucx" && t != "mpi") fail(ErrorKind::Usage, "MOERUN_INTERNODE must be ucx or mpi, not \"", t, "\"");
  return t;
}

std::unique_ptr<AllToAllV> make_alltoallv(A2aKind kind, MPI_Comm world, const Topology& topo, double timeout_s) {
  if (kind == A2aKind::Mpi) return std::make_unique<MpiAllToAllV>(world, timeout_s);
  std::unique_ptr<PointToPoint> net;
#ifdef MOERUN_HAVE_UCX
  if (internode_transport() == "ucx") net = std::make_unique<UcxPointToPoint>(world);
#endif
  if (!net) net = std::make_unique<MpiPointToPoint>(world);
  return std::make_unique<HierarchicalAllToAllV>(world, topo, std::move(net), timeout_s);
}

}  // namespace moerun::comm

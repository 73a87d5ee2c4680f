// All-to-all selection.
#include "comm/exchange_select.hpp"

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
  fail_config("a2a", "must be mpi or hier, not \"", name, "\"");
}

const char* a2a_name(A2aKind kind) {
  return kind == A2aKind::Hier ? "hier" : "mpi";
}

std::string internode_transport(const TransportConfig& transport) {
  std::string t = transport.internode;
#ifdef MOERUN_HAVE_UCX
  if (t.empty()) t = "ucx";
#else
  if (t.empty()) t = "mpi";
  if (t == "ucx") fail_config("internode", "is ucx, but this build has no UCX");
#endif
  if (t != "ucx" && t != "mpi") fail_config("internode", "must be ucx or mpi, not \"", t, "\"");
  return t;
}

std::unique_ptr<AllToAllV> make_alltoallv(A2aKind kind, MPI_Comm world, const Topology& topo, double timeout_s,
                                          const TransportConfig& transport) {
  if (kind == A2aKind::Mpi) return std::make_unique<MpiAllToAllV>(world, timeout_s);
  std::unique_ptr<PointToPoint> net;
#ifdef MOERUN_HAVE_UCX
  if (internode_transport(transport) == "ucx") net = std::make_unique<UcxPointToPoint>(world, transport.ucx_peer_errors);
#endif
  if (!net) net = std::make_unique<MpiPointToPoint>(world);
  return std::make_unique<HierarchicalAllToAllV>(world, topo, std::move(net), timeout_s);
}

}  // namespace moerun::comm

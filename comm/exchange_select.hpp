// Choosing and building the all-to-all-v: `mpi` (point-to-point MPI, flat) or `hier` (hierarchical:
// shared memory inside a node, UCX between nodes — MPI where UCX is not built). There is no
// automatic choice: hier has not measured faster than mpi anywhere yet (docs/log/performance-2026.md), so
// `auto` would only ever mean mpi; launch/ accepts `--a2a auto` as a deprecated name for mpi.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "comm/alltoallv.hpp"
#include "comm/topology.hpp"

namespace moerun::comm {

enum class A2aKind { Mpi, Hier };

A2aKind parse_a2a(const std::string& name);  // mpi | hier; ConfigError on field "a2a" otherwise
const char* a2a_name(A2aKind kind);
// How `hier` moves rows between nodes (launch/ fills it from MOERUN_INTERNODE, MOERUN_UCX_PEER_ERRORS).
struct TransportConfig {
  std::string internode;  // ucx | mpi; empty: ucx when built with UCX, else mpi
  int ucx_peer_errors = -1;  // UCX error mode PEER: -1 for peers on other hosts only, 0 never, 1 always
};
// The inter-node transport `hier` uses: Usage error naming `internode` when it is neither, or ucx
// without UCX.
std::string internode_transport(const TransportConfig& t);

std::unique_ptr<AllToAllV> make_alltoallv(A2aKind kind, MPI_Comm world, const Topology& topo, double timeout_s,
                                          const TransportConfig& transport = {});

}  // namespace moerun::comm

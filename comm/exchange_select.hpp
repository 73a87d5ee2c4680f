// Choosing and building the all-to-all-v: `mpi` (point-to-point MPI, flat), `hier` (hierarchical:
// shared memory inside a node, UCX between nodes — MPI where UCX is not built), or `auto`, which
// picks by node count and message size from the measurements in docs/PERFORMANCE.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "comm/alltoallv.hpp"
#include "comm/topology.hpp"

namespace moerun::comm {

enum class A2aKind { Mpi, Hier, Auto };

A2aKind parse_a2a(const std::string& name);  // Usage error otherwise
const char* a2a_name(A2aKind kind);
// `auto` resolved: the same answer on every rank for the same arguments.
A2aKind resolve_a2a(A2aKind requested, int nodes, int64_t bytes_per_rank);
// Inter-node transport of `hier`: MOERUN_INTERNODE=ucx|mpi, default ucx when built with UCX.
std::string internode_transport();

std::unique_ptr<AllToAllV> make_alltoallv(A2aKind kind, MPI_Comm world, const Topology& topo, double timeout_s);

}  // namespace moerun::comm

// Roles from node ids (pure), and the MPI-built topology on the real job this test runs in.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "comm/topology.hpp"

namespace moerun::comm {
namespace {

TEST(Topology, FirstLocalRanksAreRouters) {
  // 6 ranks as 2 nodes of 3, 1 router per node.
  Topology t = topology_from_nodes({0, 0, 0, 1, 1, 1}, 1);
  EXPECT_EQ(t.nodes, 2);
  EXPECT_EQ(t.routers, (std::vector<int>{0, 3}));
  EXPECT_EQ(t.experts, (std::vector<int>{1, 2, 4, 5}));
  EXPECT_EQ(t.self(4).local_rank, 1);
  EXPECT_EQ(t.router_index(3), 1);
  EXPECT_EQ(t.router_index(2), -1);
}

TEST(Topology, OneRankPlaysBothRoles) {
  Topology t = topology_from_nodes({0}, 1);
  EXPECT_TRUE(t.is_router(0));
  EXPECT_TRUE(t.is_expert(0));
}

TEST(Topology, LayoutsWithoutExpertsAreUsageErrors) {
  try {
    topology_from_nodes({0, 1}, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("no expert rank"), std::string::npos);
  }
  try {
    topology_from_nodes({0, 0}, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("exceeds the 2 rank(s) of node 0"), std::string::npos);
  }
}

TEST(Topology, RouterNodesHoldTheRouters) {
  // A router node apart: node 0's rank routes, every rank of nodes 1 and 2 is an expert rank.
  Topology apart = topology_from_nodes({0, 1, 2}, 1, 1);
  EXPECT_EQ(apart.routers, (std::vector<int>{0}));
  EXPECT_EQ(apart.experts, (std::vector<int>{1, 2}));
  // Two hosts of one rank each: without --router-nodes both would route and none hold experts.
  EXPECT_EQ(topology_from_nodes({0, 1}, 1, 1).experts, (std::vector<int>{1}));
  // The first two of three nodes route.
  Topology two = topology_from_nodes({0, 0, 1, 1, 2, 2}, 1, 2);
  EXPECT_EQ(two.routers, (std::vector<int>{0, 2}));
  EXPECT_EQ(two.experts, (std::vector<int>{1, 3, 4, 5}));
  // 0: every node.
  EXPECT_EQ(topology_from_nodes({0, 0, 1, 1}, 1, 0).routers, (std::vector<int>{0, 2}));
  try {
    topology_from_nodes({0, 1, 2}, 1, 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("--router-nodes 4 is not in [0, 3]"), std::string::npos) << e.what();
  }
  try {
    topology_from_nodes({0, 1, 1}, 2, 1);  // the router node has one rank for 2 routers
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("exceeds the 1 rank(s) of node 0"), std::string::npos) << e.what();
  }
}

TEST(Topology, BuiltOverMpiAgreesWithRanksPerNode) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Topology t = build_topology(MPI_COMM_WORLD, 1, 2);
  EXPECT_EQ(t.world_size, size);
  EXPECT_EQ(t.nodes, (size + 1) / 2);
  for (int r = 0; r < size; ++r) EXPECT_EQ(t.self(r).node, r / 2);
  Topology shared = build_topology(MPI_COMM_WORLD, 1, 0);
  EXPECT_EQ(shared.nodes, 1);  // one host: one shared-memory node
}

}  // namespace
}  // namespace moerun::comm

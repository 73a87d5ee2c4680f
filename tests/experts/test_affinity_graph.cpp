// Affinity graph: counts and conditional probabilities on a hand-made trace (values derived by
// hand below), the HDF5 round trip, strongest edges, and the next-layer prediction.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/error.hpp"
#include "experts/affinity_graph.hpp"

namespace moerun::experts {
namespace {

// 3 tokens, 2 layers, 3 experts, top-2.
//   token 0: layer 0 {0, 1}, layer 1 {2, 0}
//   token 1: layer 0 {0, 2}, layer 1 {2, 1}
//   token 2: layer 0 {1, -1 (dropped)}, layer 1 {0, 2}
io::RoutingTrace trace() {
  io::RoutingTrace t;
  t.num_layers = 2;
  t.num_experts = 3;
  t.top_k = 2;
  t.experts = {{0, 1, 0, 2, 1, -1}, {2, 0, 2, 1, 0, 2}};
  t.request = {0, 0, 1};
  t.position = {0, 1, 0};
  return t;
}

TEST(AffinityGraph, CountsAndProbabilitiesByHand) {
  const io::AffinityGraph g = build_affinity_graph({trace()}, {"t.h5"});
  EXPECT_EQ(g.tokens, 3);
  // next_counts[0][i][j]: expert 0 (tokens 0, 1) -> {2,0} and {2,1}: to 0:1, to 1:1, to 2:2.
  auto nc = [&](int i, int j) { return g.next_counts[static_cast<std::size_t>(i * 3 + j)]; };
  EXPECT_EQ(nc(0, 0), 1);
  EXPECT_EQ(nc(0, 1), 1);
  EXPECT_EQ(nc(0, 2), 2);
  // expert 1 (tokens 0, 2) -> {2,0} and {0,2}: to 0:2, to 2:2.
  EXPECT_EQ(nc(1, 0), 2);
  EXPECT_EQ(nc(1, 1), 0);
  EXPECT_EQ(nc(1, 2), 2);
  // expert 2 (token 1) -> {2,1}.
  EXPECT_EQ(nc(2, 1), 1);
  EXPECT_EQ(nc(2, 2), 1);
  // P(j | i) = count / tokens through i: expert 0 had 2 tokens.
  EXPECT_DOUBLE_EQ(g.p_next(0, 0, 2), 1.0);
  EXPECT_DOUBLE_EQ(g.p_next(0, 0, 1), 0.5);
  EXPECT_DOUBLE_EQ(g.p_next(0, 2, 1), 1.0);
  // Coactivation at layer 0: (0,1) once, (0,2) once; the dropped slot counts for nothing.
  auto co = [&](int l, int i, int j) { return g.coactivation_counts[static_cast<std::size_t>((l * 3 + i) * 3 + j)]; };
  EXPECT_EQ(co(0, 0, 1), 1);
  EXPECT_EQ(co(0, 1, 0), 1);
  EXPECT_EQ(co(0, 0, 2), 1);
  EXPECT_EQ(co(0, 1, 2), 0);
  EXPECT_DOUBLE_EQ(g.coactivation[static_cast<std::size_t>((0 * 3 + 0) * 3 + 1)], 0.5);
  // Frequencies: layer 0 expert 0 in 2 of 3 tokens; layer 1 expert 2 in all 3.
  EXPECT_DOUBLE_EQ(g.freq(0, 0), 2.0 / 3);
  EXPECT_DOUBLE_EQ(g.freq(1, 2), 1.0);
}

TEST(AffinityGraph, FileRoundTripAndStrongestEdges) {
  const io::AffinityGraph g = build_affinity_graph({trace(), trace()}, {"a.h5", "b.h5"});
  EXPECT_EQ(g.tokens, 6);
  const std::string p = (std::filesystem::temp_directory_path() / ("moerun-aff-" + std::to_string(::getpid()) + ".h5")).string();
  io::write_affinity_graph(p, g);
  const io::AffinityGraph r = io::read_affinity_graph(p);
  std::filesystem::remove(p);
  EXPECT_EQ(r.next_counts, g.next_counts);
  EXPECT_EQ(r.coactivation, g.coactivation);
  EXPECT_EQ(r.frequency, g.frequency);
  const auto edges = strongest_edges(r, 3, 1);
  ASSERT_EQ(edges.size(), 3u);
  EXPECT_DOUBLE_EQ(edges[0].probability, 1.0);
  // Among the probability-1 edges, more tokens first: 0->2 and 1->0, 1->2 have 4 tokens each, 2->* 2.
  EXPECT_EQ(edges[0].count, 4);
}

TEST(AffinityGraph, MismatchedTracesNameTheFile) {
  io::RoutingTrace other = trace();
  other.num_experts = 4;
  try {
    build_affinity_graph({trace(), other}, {"a.h5", "b.h5"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b.h5"), std::string::npos);
  }
}

TEST(AffinityGraph, PredictionWeighsTheEvidence) {
  const io::AffinityGraph g = build_affinity_graph({trace()}, {"t.h5"});
  // 3 rows on expert 0 and 1 on expert 2 at layer 0: share for j = (3 P(j|0) + 1 P(j|2)) / 4.
  const auto p = predict_next_layer(g, 1, {3, 0, 1});
  EXPECT_DOUBLE_EQ(p[0], (3 * 0.5 + 1 * 0.0) / 4);
  EXPECT_DOUBLE_EQ(p[1], (3 * 0.5 + 1 * 1.0) / 4);
  EXPECT_DOUBLE_EQ(p[2], (3 * 1.0 + 1 * 1.0) / 4);
  // No evidence, or layer 0: the marginal frequency.
  const auto q = predict_next_layer(g, 0, {});
  EXPECT_DOUBLE_EQ(q[1], 2.0 / 3);
}

}  // namespace
}  // namespace moerun::experts

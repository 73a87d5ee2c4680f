// The distributed MoE layer on three real ranks (a router, two expert ranks): DistributedMoeLayer
// with ExpertServer gives the single-process LocalMoeLayer's output bit for bit, over two layers,
// two micro-batches in flight, dropped slots, an expert rank that gets no rows, and both the
// point-to-point exchange (whose combine runs no counts exchange: plan_known) and MPI's own
// MPI_Alltoallv. A combine whose known counts disagree with what a peer sends is a Comm error.
#include <gtest/gtest.h>

#include <mpi.h>

#include <cmath>
#include <memory>

#include "base/error.hpp"
#include "comm/alltoallv.hpp"
#include "comm/hierarchical_alltoallv.hpp"
#include "comm/point_to_point.hpp"
#include "comm/topology.hpp"
#include "experts/backend.hpp"
#include "experts/placement.hpp"
#include "experts/resident_experts.hpp"
#include "model/model_config.hpp"
#include "convert/synthetic_model.hpp"
#include "runtime/distributed_moe.hpp"
#include "runtime/moe_layer.hpp"

namespace moerun::runtime {
namespace {

constexpr int64_t kD = 16, kFf = 24, kE = 4, kLayers = 2, kK = 2;

model::ModelConfig small_config() {
  model::ModelConfig mc;
  mc.hidden_size = kD;
  mc.intermediate_size = kFf;
  mc.num_experts = kE;
  mc.num_layers = kLayers;
  mc.top_k = kK;
  mc.dtype = DType::F32;
  mc.expert_format = {DType::F32, WeightScheme::Plain};
  return mc;
}

// Every (layer, expert) for which `owns` holds, with weights that depend only on (layer, expert).
std::unique_ptr<experts::ResidentExperts> make_store(experts::ExpertBackend& backend, const model::ModelConfig& mc,
                                                     const std::function<bool(int64_t, int64_t)>& owns) {
  auto store = std::make_unique<experts::ResidentExperts>(backend, kE);
  std::vector<float> raw(static_cast<std::size_t>(3 * kFf * kD));
  for (int64_t l = 0; l < kLayers; ++l)
    for (int64_t e = 0; e < kE; ++e) {
      if (!owns(l, e)) continue;
      const auto w = convert::synth_tensor(7, str("expert/", l, "/", e), 3 * kFf * kD, 1.0f / std::sqrt(float(kD)));
      std::copy(w.begin(), w.end(), raw.begin());
      auto slot = backend.allocate_expert();
      backend.load_expert(raw.data(), *slot);
      store->insert(l, e, std::move(slot));
    }
  (void)mc;
  return store;
}

// T tokens' routing: expert (t + j) mod E, or slot dropped every fifth slot; expert 3 never used in layer 1.
router::RoutingDecision routing(int64_t layer, int64_t T) {
  router::RoutingDecision r = router::RoutingDecision::empty(T, kK);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < kK; ++j) {
      const int64_t s = t * kK + j;
      if (s % 5 == 4) continue;
      int32_t e = static_cast<int32_t>((t + j + layer) % kE);
      if (layer == 1 && e == 3) e = 0;
      r.expert[s] = e;
      r.weight[s] = 0.25f + 0.1f * static_cast<float>(j);
    }
  return r;
}

enum class Transport { PointToPoint, Collective, Hierarchical };

std::unique_ptr<comm::AllToAllV> make_a2a(Transport t, const comm::Topology& topo) {
  if (t == Transport::PointToPoint) return std::make_unique<comm::MpiAllToAllV>(MPI_COMM_WORLD, 30);
  if (t == Transport::Collective) return std::make_unique<comm::MpiCollectiveAllToAllV>(MPI_COMM_WORLD, 30);
  return std::make_unique<comm::HierarchicalAllToAllV>(MPI_COMM_WORLD, topo, std::make_unique<comm::MpiPointToPoint>(MPI_COMM_WORLD), 30);
}

void check_equal_to_local(Transport transport) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 3);
  const comm::Topology topo = comm::build_topology(MPI_COMM_WORLD, 1, 3);  // rank 0 routes; 1, 2 hold experts
  // Layer 0: experts alternate between ranks 1 and 2; layer 1: all on rank 1 (rank 2 gets no rows).
  experts::Placement placement = experts::round_robin_placement(kLayers, kE, topo);
  for (int64_t e = 0; e < kE; ++e) placement.holders[static_cast<std::size_t>(kE + e)] = {1};
  const model::ModelConfig mc = small_config();
  Matmul mm;
  auto backend = experts::make_expert_backend({}, mc, mm);
  auto dispatch = make_a2a(transport, topo), combine = make_a2a(transport, topo);
  MoeExchangeProtocol protocol(*dispatch, *combine, topo, rank, kD);
  const std::vector<int64_t> tokens{5, 3};  // per micro-batch
  if (rank != 0) {
    auto store = make_store(*backend, mc, [&](int64_t l, int64_t e) { return placement.owner_of(l, e) == rank; });
    ExpertServer server(protocol, *backend, *store, kE);
    for (int64_t l = 0; l < kLayers; ++l) server.serve_layer(l, 2);
    return;
  }
  auto all = make_store(*backend, mc, [](int64_t, int64_t) { return true; });
  LocalMoeLayer local(*backend, *all, kD, kE);
  DistributedMoeLayer distributed(protocol, placement, kE);
  for (int64_t l = 0; l < kLayers; ++l) {
    std::vector<std::vector<float>> x(2), want(2), got(2);
    for (int mb = 0; mb < 2; ++mb) {
      const int64_t T = tokens[static_cast<std::size_t>(mb)];
      x[mb] = convert::synth_tensor(11, str("x/", l, "/", mb), T * kD, 1.0f);
      want[mb].assign(static_cast<std::size_t>(T * kD), 0.0f);
      got[mb].assign(want[mb].size(), 0.0f);
      local.start(l, 0, x[mb].data(), T, routing(l, T));
      local.finish(0, want[mb].data());
      distributed.start(l, mb, x[mb].data(), T, routing(l, T));  // both micro-batches in flight
    }
    for (int mb = 0; mb < 2; ++mb) {
      distributed.finish(mb, got[mb].data());
      EXPECT_EQ(got[mb], want[mb]) << "layer " << l << " micro-batch " << mb;
      float norm = 0;
      for (float v : got[mb]) norm += std::fabs(v);
      EXPECT_GT(norm, 0.0f) << "the experts computed nothing";
    }
  }
}

TEST(DistributedMoe, PointToPointCombineWithoutCountsEqualsLocal) {
  check_equal_to_local(Transport::PointToPoint);
}

TEST(DistributedMoe, MpiAlltoallvEqualsLocal) {
  check_equal_to_local(Transport::Collective);
}

TEST(DistributedMoe, HierarchicalEqualsLocal) {
  check_equal_to_local(Transport::Hierarchical);
}

// A reply over two virtual nodes (ranks 0, 1 | 2): its counts are the request's, transposed, and
// hier lays out the reply from them with no network counts (what remote ranks send each rank is
// what that rank expects). Every byte arrives where the sender meant it.
TEST(DistributedMoe, HierarchicalReplyWithKnownCountsAcrossNodes) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const comm::Topology topo = comm::build_topology(MPI_COMM_WORLD, 0, 2);
  ASSERT_EQ(topo.nodes, 2);
  comm::HierarchicalAllToAllV there(MPI_COMM_WORLD, topo, std::make_unique<comm::MpiPointToPoint>(MPI_COMM_WORLD), 30),
      back(MPI_COMM_WORLD, topo, std::make_unique<comm::MpiPointToPoint>(MPI_COMM_WORLD), 30);
  for (int round = 0; round < 3; ++round) {
    std::vector<int64_t> send(3);
    for (int p = 0; p < 3; ++p) send[p] = 4 * ((rank + 2 * p + round) % 4);  // some pairs send nothing
    auto h = there.open(there.plan(send, "request"), 0);
    int32_t* out = h->send_as<int32_t>();
    for (int p = 0, i = 0; p < 3; ++p)
      for (int64_t j = 0; j < send[p] / 4; ++j) out[i++] = rank * 1000 + p * 100 + round * 10 + static_cast<int32_t>(j);
    h->post();
    h->wait();
    const std::vector<int64_t> got = h->plan().recv_bytes;
    std::vector<int32_t> echo(h->recv_as<int32_t>(), h->recv_as<int32_t>() + h->plan().recv_total() / 4);
    auto r = back.open(back.plan_known(got, send, "reply"), 0, echo.data());  // the reply: what came, sent back
    r->post();
    r->wait();
    const int32_t* in = r->recv_as<int32_t>();
    for (int p = 0, i = 0; p < 3; ++p)
      for (int64_t j = 0; j < send[p] / 4; ++j, ++i)
        ASSERT_EQ(in[i], rank * 1000 + p * 100 + round * 10 + j) << "round " << round << " from rank " << p;
  }
}

TEST(DistributedMoe, KnownCountsThatDisagreeAreACommError) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // hier shares known counts inside the node for its layout, so a node peer's are checked.
  const comm::Topology topo = comm::build_topology(MPI_COMM_WORLD, 0, 3);
  comm::HierarchicalAllToAllV hier(MPI_COMM_WORLD, topo, std::make_unique<comm::MpiPointToPoint>(MPI_COMM_WORLD), 30);
  const std::vector<int64_t> send(3, 8);
  EXPECT_EQ(hier.plan_known(send, send, "agreeing counts").recv_bytes, send);
  std::vector<int64_t> expect = send;
  if (rank == 0) expect[1] = 16;  // rank 0 expects twice what rank 1 sends it
  if (rank == 0) {
    try {
      hier.plan_known(send, expect, "disagreeing counts");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Comm);
      EXPECT_NE(std::string(e.what()).find("rank 1 sends 8 bytes where 16 were expected"), std::string::npos) << e.what();
    }
  } else {
    EXPECT_NO_THROW(hier.plan_known(send, expect, "disagreeing counts"));
  }
  // A transport without a counts exchange of its own takes them as given, checked in size only.
  comm::MpiAllToAllV p2p(MPI_COMM_WORLD, 30);
  const comm::ExchangePlan given = p2p.plan_known(send, expect, "taken as given");
  EXPECT_EQ(given.recv_bytes, expect);
  EXPECT_THROW(p2p.plan_known(send, std::vector<int64_t>(2, 0), "wrong size"), Error);
}

}  // namespace
}  // namespace moerun::runtime

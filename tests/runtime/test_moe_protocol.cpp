// MoeExchangeProtocol on two real ranks (a router and an expert rank): the layer's steps in order,
// records that arrive whole with their counts, and an exchange out of protocol order refused
// (before any counts move, so both ranks stay in step).
#include <gtest/gtest.h>

#include <mpi.h>

#include "base/error.hpp"
#include "comm/alltoallv.hpp"
#include "comm/topology.hpp"
#include "runtime/moe_protocol.hpp"

namespace moerun::runtime {
namespace {

using Phase = MoeExchangeProtocol::Phase;

TEST(MoeProtocol, LayerStepsAreAllDispatchesThenAllCombines) {
  const auto steps = MoeExchangeProtocol::layer_steps(3);
  ASSERT_EQ(steps.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(steps[static_cast<std::size_t>(i)].phase, i < 3 ? Phase::Dispatch : Phase::Combine);
    EXPECT_EQ(steps[static_cast<std::size_t>(i)].micro_batch, i % 3);
  }
}

TEST(MoeProtocol, RouterAndExpertRankFollowTheSameSteps) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 2);
  const comm::Topology topo = comm::build_topology(MPI_COMM_WORLD, 1, 2);  // rank 0 routes, rank 1 serves experts
  comm::MpiAllToAllV dispatch(MPI_COMM_WORLD, 30), combine(MPI_COMM_WORLD, 30);
  const int64_t d = 3;
  MoeExchangeProtocol p(dispatch, combine, topo, rank, d);
  const bool router = rank == 0;
  for (int64_t layer = 0; layer < 2; ++layer) {
    std::vector<std::unique_ptr<comm::ExchangeHandle>> in_flight;
    std::vector<std::vector<float>> replies(2);
    for (const auto& step : MoeExchangeProtocol::layer_steps(2)) {
      const int mb = step.micro_batch;
      const int64_t rows = 2 + mb;  // the router sends 2, then 3 rows
      if (step.phase == Phase::Dispatch) {
        auto h = p.open(Phase::Dispatch, layer, mb, router ? std::vector<int64_t>{0, rows} : std::vector<int64_t>{0, 0});
        if (router) {
          char* rec = h->send_as<char>();
          for (int64_t r = 0; r < rows; ++r) {
            const int32_t e = static_cast<int32_t>(r);
            std::memcpy(rec + r * MoeExchangeProtocol::dispatch_record_bytes(d), &e, 4);
          }
        }
        h->post();
        if (router) {
          in_flight.push_back(std::move(h));  // both micro-batches in flight together
        } else {
          h->wait();
          EXPECT_EQ(p.rows_from(*h, Phase::Dispatch), (std::vector<int64_t>{rows, 0}));
          replies[static_cast<std::size_t>(mb)].assign(static_cast<std::size_t>(rows * d), static_cast<float>(layer * 10 + mb));
        }
      } else if (router) {
        in_flight[static_cast<std::size_t>(mb)]->wait();
        auto h = p.open(Phase::Combine, layer, mb, {0, 0});
        EXPECT_EQ(p.rows_from(*h, Phase::Combine), (std::vector<int64_t>{0, rows}));
        h->post();
        h->wait();
        EXPECT_EQ(h->recv_as<float>()[rows * d - 1], static_cast<float>(layer * 10 + mb));
      } else {
        auto h = p.open(Phase::Combine, layer, mb, {rows, 0}, replies[static_cast<std::size_t>(mb)].data());
        h->post();
        h->wait();
      }
    }
  }
  // Out of order: a combine before its dispatch, a second micro-batch first. Refused locally.
  EXPECT_THROW(p.open(Phase::Combine, 2, 0, {0, 0}), Error);
  EXPECT_THROW(p.open(Phase::Dispatch, 2, 1, {0, 0}), Error);
}

}  // namespace
}  // namespace moerun::runtime

// The MoE layer across ranks (DESIGN §1), following MoeExchangeProtocol (runtime/moe_protocol.hpp).
// Router side (DistributedMoeLayer): group the routed rows by destination rank and expert, dispatch
// them, and after the expert ranks answer, combine in slot order. Expert side (ExpertServer): for
// every layer and micro-batch of every step, receive rows from all routers, run each local expert
// on its rows, send the results back in arrival order. All ranks step through layers and
// micro-batches in lockstep.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/alltoallv.hpp"
#include "comm/topology.hpp"
#include "experts/placement.hpp"
#include "runtime/moe_layer.hpp"
#include "runtime/moe_protocol.hpp"

namespace moerun::runtime {

class DistributedMoeLayer final : public MoeLayer {
 public:
  DistributedMoeLayer(MoeExchangeProtocol& protocol, const experts::Placement& placement, int64_t num_experts);
  void start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) override;
  void finish(int mb, float* out) override;
  const MoePhaseTimes& times() const override { return times_; }

 private:
  // A dispatch in flight and what its combine needs (as DeepEP's combine consumes its dispatch's
  // handle): the layout of the rows sent and how many went to each peer, which is what comes back.
  struct InFlight {
    int64_t layer = 0;
    std::vector<float> weight;
    router::DispatchPlan layout;     // slot_row: the row of each slot in send order, -1 dropped
    std::vector<int64_t> rows_to;    // [peer] rows sent
    std::unique_ptr<comm::ExchangeHandle> dispatch;  // posted, until finish()
  };
  MoeExchangeProtocol& protocol_;
  const experts::Placement& placement_;
  int64_t num_experts_;
  std::vector<InFlight> mbs_;
  MoePhaseTimes times_;
};

class ExpertServer {
 public:
  ExpertServer(MoeExchangeProtocol& protocol, experts::ExpertBackend& backend, experts::ExpertStore& store,
               int64_t num_experts);
  // One layer of `micro_batches`, in the protocol's order; returns when its replies are sent.
  void serve_layer(int64_t layer, int micro_batches);
  const MoePhaseTimes& times() const { return times_; }

 private:
  struct Reply {
    std::vector<int64_t> rows_from;  // [peer]
    std::vector<float> data;
    std::unique_ptr<comm::ExchangeHandle> pending;
  };
  MoeExchangeProtocol& protocol_;
  experts::ExpertBackend& backend_;
  experts::ExpertStore& store_;
  int64_t num_experts_;
  std::vector<Reply> replies_;
  MoePhaseTimes times_;
};

}  // namespace moerun::runtime

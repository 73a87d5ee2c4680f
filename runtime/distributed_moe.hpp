// The MoE layer across ranks (DESIGN §1). Router side (DistributedMoeLayer): group the routed rows by
// destination rank and expert, exchange counts then rows (records: int32 expert id + d floats), and
// after the expert ranks answer, combine in slot order. Expert side (ExpertServer): for every layer
// and micro-batch of every step, receive rows from all routers, run each local expert on its rows,
// send the results back in arrival order. Dispatch and combine use separate communicators so their
// collectives never interleave; all ranks step through layers and micro-batches in lockstep.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/alltoallv.hpp"
#include "comm/topology.hpp"
#include "experts/placement.hpp"
#include "runtime/moe_layer.hpp"

namespace moerun::runtime {

// Who exchanges with whom: dispatch goes router -> expert, combine expert -> router.
struct MoeExchangePatterns {
  comm::ExchangePattern forward;
  comm::ExchangePattern backward;
};
MoeExchangePatterns moe_exchange_patterns(const comm::Topology& topo, int rank);

class DistributedMoeLayer final : public MoeLayer {
 public:
  DistributedMoeLayer(comm::AllToAllV& dispatch, comm::AllToAllV& combine, const experts::Placement& placement,
                      int64_t hidden, int64_t num_experts, MoeExchangePatterns pattern);
  void start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) override;
  void finish(int mb, float* out) override;
  const MoePhaseTimes& times() const override { return times_; }

 private:
  struct InFlight {
    int64_t layer = 0;
    int64_t T = 0;
    int64_t top_k = 0;
    std::vector<float> weight;
    std::vector<int64_t> slot_row;   // [T*k] row of the slot in send order, -1 dropped
    std::vector<int64_t> rows_to;    // [peer] rows sent
    std::vector<char> send;
    std::unique_ptr<comm::PendingExchange> pending;
  };
  comm::AllToAllV& dispatch_;
  comm::AllToAllV& combine_;
  const experts::Placement& placement_;
  int64_t hidden_;
  int64_t num_experts_;
  MoeExchangePatterns pattern_;
  std::vector<InFlight> mbs_;
  MoePhaseTimes times_;
};

class ExpertServer {
 public:
  ExpertServer(comm::AllToAllV& dispatch, comm::AllToAllV& combine, experts::ExpertBackend& backend, experts::ExpertStore& store,
               int64_t hidden, int64_t num_experts, MoeExchangePatterns pattern);
  // One layer: `micro_batches` exchanges in order, then waits for its replies to drain.
  void serve_layer(int64_t layer, int micro_batches);
  const MoePhaseTimes& times() const { return times_; }

 private:
  struct Reply {
    std::vector<int64_t> rows_from;  // [peer]
    std::vector<float> data;
    std::unique_ptr<comm::PendingExchange> pending;
  };
  comm::AllToAllV& dispatch_;
  comm::AllToAllV& combine_;
  experts::ExpertBackend& backend_;
  experts::ExpertStore& store_;
  int64_t hidden_;
  int64_t num_experts_;
  MoeExchangePatterns pattern_;
  AlignedBuffer gathered_, results_;
  std::vector<Reply> replies_;
  MoePhaseTimes times_;
};

// Record size on the wire: int32 expert id, then the row.
inline std::size_t dispatch_record_bytes(int64_t hidden) { return 4 + static_cast<std::size_t>(hidden) * 4; }

}  // namespace moerun::runtime

// The MoE layer across ranks (DESIGN §1), following MoeExchangeProtocol (runtime/moe_protocol.hpp).
// Router side (DistributedMoeLayer): group the routed rows by destination rank and expert, dispatch
// them, and after the expert ranks answer, combine in slot order. The rows of an expert with
// replicas are split among its holders (experts/replica_split) by every router alike: the routers
// first share how many rows of each expert they have (one small allgather, only in layers with
// replicas). Expert side (ExpertServer): for
// every layer and micro-batch of every step, receive rows from all routers, run each local expert
// on its rows, send the results back in arrival order. All ranks step through layers and
// micro-batches in lockstep.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <mpi.h>

#include "comm/alltoallv.hpp"
#include "comm/topology.hpp"
#include "experts/placement.hpp"
#include "runtime/moe_layer.hpp"
#include "runtime/moe_protocol.hpp"

namespace moerun::runtime {

// The routers as a group: who this router is among them, and their communicator for the split of
// replicated experts' rows.
struct RouterGroup {
  MPI_Comm comm = MPI_COMM_NULL;  // the router ranks; MPI_COMM_NULL: this is the only router
  int index = 0;  // this router's position among them
  double timeout_s = 300;
  int64_t granule = 0;  // experts::replica_row_granule of the run
};

// What a router counted of the rows it routed.
struct RoutedRows {
  std::vector<int64_t> per_expert;  // [layer * num_experts + expert] rows this router routed (grown by layer)
  int64_t to_replicas = 0;  // rows of replicated experts sent to a holder other than the first
  int64_t split = 0;  // experts whose rows this router sent to more than one rank (per micro-batch)
};

class DistributedMoeLayer final : public MoeLayer {
 public:
  // `placement` is read at every start(): the engine may change it between steps (rebalancing).
  // `hints`: pass the gate prefetch's predictions to the expert ranks (needs num_experts <= hidden).
  DistributedMoeLayer(MoeExchangeProtocol& protocol, const experts::Placement& placement, int64_t num_experts, RouterGroup group = {},
                      bool hints = false);
  void start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) override;
  void finish(int mb, float* out) override;
  const MoePhaseTimes& times() const override { return times_; }
  bool wants_hints() const override { return hints_; }
  // Kept until the next start(), whose dispatch carries it to the ranks holding the hinted experts.
  void hint(int64_t layer, const std::vector<int64_t>& rows) override;
  const RoutedRows& routed() const { return routed_; }
  void reset_routed() { routed_ = {}; }

 private:
  // A run of one expert's rows (plan rows [begin, end) of it) for one rank.
  struct Piece {
    int rank;
    int32_t expert;
    int64_t begin, end;
  };
  std::vector<Piece> pieces(int64_t layer, const router::DispatchPlan& plan);
  void count(int64_t layer, const router::DispatchPlan& plan, const std::vector<Piece>& pieces);
  // A dispatch in flight and what its combine needs (as DeepEP's combine consumes its dispatch's
  // handle): the layout of the rows sent and how many went to each peer, which is what comes back.
  struct InFlight {
    int64_t layer = 0;
    std::vector<float> weight;
    router::DispatchPlan layout;  // slot_row: the row of each slot in send order, -1 dropped
    std::vector<int64_t> rows_to;  // [peer] records sent (rows, and a hint record to some)
    std::vector<int64_t> replies;  // [peer] rows sent: what comes back
    std::unique_ptr<comm::ExchangeHandle> dispatch;  // posted, until finish()
  };
  MoeExchangeProtocol& protocol_;
  const experts::Placement& placement_;
  int64_t num_experts_;
  RouterGroup group_;
  std::vector<InFlight> mbs_;
  MoePhaseTimes times_;
  RoutedRows routed_;
  bool hints_;
  int64_t hint_layer_ = -1;
  std::vector<int64_t> hint_rows_;
  // The hint record's bytes (kHintRecord, then the predicted rows per expert as floats).
  void write_hint(char* dst) const;
};

class ExpertServer {
 public:
  ExpertServer(MoeExchangeProtocol& protocol, experts::ExpertBackend& backend, experts::ExpertStore& store, int64_t num_experts);
  // One layer of `micro_batches`, in the protocol's order; returns when its replies are sent.
  void serve_layer(int64_t layer, int micro_batches);
  const MoePhaseTimes& times() const { return times_; }
  // Rows this rank received in each serve_layer call since the last take (all micro-batches), in call order.
  std::vector<int64_t> take_layer_rows() { return std::exchange(layer_rows_, {}); }

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
  std::vector<int64_t> layer_rows_;
  std::vector<int64_t> hinted_;  // the routers' predictions for the next layer, summed (gate prefetch)
  void take_hint(const char* floats, int64_t d);
};

}  // namespace moerun::runtime

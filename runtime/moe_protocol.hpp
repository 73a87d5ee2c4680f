// MoeExchangeProtocol: the per-layer exchange protocol of the distributed MoE layer, written once
// and followed by both sides (routers: DistributedMoeLayer; expert ranks: ExpertServer).
//  - Two AllToAllV, so the directions never interleave: dispatch (router -> expert ranks) and
//    combine (expert -> router ranks). Counts travel only along those edges (the patterns), and
//    only for the dispatch: a combine returns to each router the rows it sent, which both sides
//    know from the dispatch (AllToAllV::plan_known), so it runs no counts exchange of its own.
//  - Per layer with M micro-batches: dispatch of micro-batches 0..M-1 in order, then their combines
//    in order (layer_steps). Every rank opens its exchanges in that order, and open() checks it.
//  - A dispatch record is an int32 expert id, then the row's d float32; a rank's rows are
//    contiguous, grouped by expert. A combine record is d float32: the expert output of each row,
//    in the order the expert rank received the rows.
//  - A router may end a rank's dispatch rows with one hint record (id kHintRecord): its floats
//    [0, num_experts) are the rows the router predicts for each expert of the next MoE layer (the
//    gate prefetch). It gets no combine record.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/alltoallv.hpp"
#include "comm/topology.hpp"

namespace moerun::runtime {

class MoeExchangeProtocol {
 public:
  enum class Phase { Dispatch, Combine };
  struct Step {
    Phase phase;
    int micro_batch;
  };
  // The order of one layer's exchanges, on every rank.
  static std::vector<Step> layer_steps(int micro_batches);
  static std::size_t dispatch_record_bytes(int64_t hidden) { return 4 + static_cast<std::size_t>(hidden) * 4; }
  static std::size_t combine_record_bytes(int64_t hidden) { return static_cast<std::size_t>(hidden) * 4; }
  static constexpr int32_t kHintRecord = -2;

  MoeExchangeProtocol(comm::AllToAllV& dispatch, comm::AllToAllV& combine, const comm::Topology& topo, int rank, int64_t hidden);
  int ranks() const { return dispatch_.size(); }
  int64_t hidden() const { return hidden_; }

  // Plans and opens the next exchange of `layer`: `rows_to[p]` records to each peer (an expert rank's
  // dispatch and a router's combine send none). Checks that it is the protocol's next step and that
  // every peer sends whole records; the handle's slot is the micro-batch, so a layer's exchanges
  // can be in flight together. `send_from`: send the caller's memory (see AllToAllV::open).
  std::unique_ptr<comm::ExchangeHandle> open(Phase phase, int64_t layer, int mb, const std::vector<int64_t>& rows_to,
                                             const void* send_from = nullptr);
  // Opens the combine of `layer` / `mb`, whose counts both sides know from its dispatch: `rows_to`
  // records to each peer, `rows_from` from each (a router sends none, an expert rank receives none).
  std::unique_ptr<comm::ExchangeHandle> open_combine(int64_t layer, int mb, const std::vector<int64_t>& rows_to,
                                                     const std::vector<int64_t>& rows_from, const void* send_from = nullptr);
  // Records each peer sends in an opened exchange.
  std::vector<int64_t> rows_from(const comm::ExchangeHandle& h, Phase phase) const;

 private:
  void next_step(Phase phase, int64_t layer, int mb);
  std::size_t record_bytes(Phase phase) const {
    return phase == Phase::Dispatch ? dispatch_record_bytes(hidden_) : combine_record_bytes(hidden_);
  }

  comm::AllToAllV& dispatch_;
  comm::AllToAllV& combine_;
  comm::ExchangePattern forward_, backward_;
  int64_t hidden_;
  // Where this rank is in the protocol: the layer and how many of its dispatches and combines.
  int64_t layer_ = -1;
  int dispatched_ = 0, combined_ = 0;
};

}  // namespace moerun::runtime

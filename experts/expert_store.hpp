// ExpertStore: what the expert compute asks for weights. ResidentExperts (all in memory) and
// ExpertCache (three tiers, prefetch) implement it. Per layer call: begin_layer with the experts
// that have rows (it returns the order to run them in: ready ones first), then acquire/release
// around each expert's FFN; an acquired expert stays in memory until released. The weights are in
// the form of the store's ExpertBackend.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experts/backend.hpp"

namespace moerun::experts {

class ExpertStore {
 public:
  virtual ~ExpertStore() = default;
  virtual bool owns(int64_t layer, int64_t expert) const = 0;
  // rows[e] for e in [0, num_experts): rows routed to expert e of `layer` on this rank now.
  virtual std::vector<int64_t> begin_layer(int64_t layer, const std::vector<int64_t>& rows) {
    (void)layer;
    std::vector<int64_t> order;
    for (int64_t e = 0; e < static_cast<int64_t>(rows.size()); ++e)
      if (rows[static_cast<std::size_t>(e)] > 0) order.push_back(e);
    return order;
  }
  virtual const ResidentExpert& acquire(int64_t layer, int64_t expert) = 0;
  virtual void release(int64_t layer, int64_t expert) { (void)layer, (void)expert; }
  // Every owned expert is in memory for good (acquire never waits): a layer's experts may all be
  // acquired at once and computed together (ExpertBackend::run_all).
  virtual bool holds_all() const { return false; }
  // Hot swap, between steps (nothing acquired): an owned expert's new weights in raw form (w1‖w3‖w2
  // as stored, verified against `xxh64`), from `where`. Later acquires see only the new weights.
  virtual void replace(int64_t layer, int64_t expert, const void* raw, uint64_t xxh64, const std::string& where) = 0;
};

}  // namespace moerun::experts

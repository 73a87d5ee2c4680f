// ExpertStore: what the expert compute asks for weights. ResidentExperts (all in memory) and
// ExpertCache (three tiers, prefetch) implement it. Per layer call: begin_layer with the experts
// that have rows (it returns the order to run them in: ready ones first), then acquire/release
// around each expert's FFN; an acquired expert stays in memory until released. The weights are in
// the form of the store's ExpertBackend.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <utility>
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
  // A prediction of a later layer's rows (rows[e] as for begin_layer), made by the router before that
  // layer's gate runs; a store that loads on demand may start bringing those experts in. Only
  // stores that say wants_hints() are given any.
  virtual bool wants_hints() const { return false; }
  virtual void hint(int64_t layer, const std::vector<int64_t>& rows) { (void)layer, (void)rows; }
  virtual const ResidentExpert& acquire(int64_t layer, int64_t expert) = 0;
  virtual void release(int64_t layer, int64_t expert) { (void)layer, (void)expert; }
  // Every owned expert is in memory for good (acquire never waits): a layer's experts may all be
  // acquired at once and computed together (ExpertBackend::run_all).
  virtual bool holds_all() const { return false; }
  // Hot swap, between steps (nothing acquired): an owned expert's new weights in raw form (w1‖w3‖w2
  // as stored, verified against `xxh64`), from `where`. Later acquires see only the new weights.
  virtual void replace(int64_t layer, int64_t expert, const void* raw, uint64_t xxh64, const std::string& where) = 0;

  // Rebalancing (runtime/rebalance.hpp). prepare(), on a background thread while steps go on: reads
  // and verifies each expert (layer, expert) this rank is to hold next, through the store's load
  // path (ResidentExperts: from L3 into new memory; the cache: from L2, else L3 into L2); returns
  // per expert its error or null. hold(), between steps with nothing acquired: from now on the rank
  // holds what `holds` says (prepared experts that did not fail come in, the others leave).
  virtual std::vector<std::exception_ptr> prepare(const std::vector<std::pair<int64_t, int64_t>>& experts) = 0;
  virtual void hold(const std::function<bool(int64_t, int64_t)>& holds) = 0;
};

}  // namespace moerun::experts

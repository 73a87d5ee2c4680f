// MoeLayer: what the router-side forward pass calls for the expert part of a layer, one micro-batch
// at a time: start() hands over the routed rows, finish() returns their combined expert output.
// Between the two the router computes the next micro-batch's attention, so a distributed
// implementation overlaps the exchange and the expert ranks' compute with it (ping-pong).
// Every implementation combines in slot order, so they agree bit for bit on the same expert rows.
#pragma once
#include <cstdint>
#include <vector>

#include "base/aligned_buffer.hpp"
#include "experts/backend.hpp"
#include "experts/expert_store.hpp"
#include "router/dispatch_plan.hpp"
#include "router/gate.hpp"

namespace moerun::runtime {

// Seconds spent per phase of the MoE part (bench infer breakdown).
struct MoePhaseTimes {
  double pack = 0;  // dispatch plan, permute, send buffers
  double exchange = 0;  // counts and payload exchanges (sending rows, expert side: receiving them)
  double wait = 0;  // router: from asking for results to having them (expert compute + return)
  double experts = 0;  // expert FFNs computed on this rank
  double combine = 0;  // weighted sum in slot order
  int64_t exchanges = 0;  // router: dispatch + combine pairs finished (what the times above are over)
};

class MoeLayer {
 public:
  virtual ~MoeLayer() = default;
  // x [T, d] must stay valid until finish(mb); `r` is copied.
  virtual void start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) = 0;
  // out[T, d] = sum over slots of weight * expert(x[token]).
  virtual void finish(int mb, float* out) = 0;
  virtual const MoePhaseTimes& times() const = 0;
  // Predicted rows per expert of a later MoE layer, for an expert store that prefetches on them
  // (experts::ExpertStore::hint); asked for only where wants_hints().
  virtual bool wants_hints() const { return false; }
  virtual void hint(int64_t layer, const std::vector<int64_t>& rows) { (void)layer, (void)rows; }
};

// Runs each expert's FFN over the block of rows routed to it, on the store's backend.
void run_local_experts(experts::ExpertBackend& backend, experts::ExpertStore& store, int64_t layer, const router::DispatchPlan& plan,
                       const float* gathered, float* results);

// Single process: all experts in this process; the work happens in finish().
class LocalMoeLayer final : public MoeLayer {
 public:
  LocalMoeLayer(experts::ExpertBackend& backend, experts::ExpertStore& experts, int64_t hidden, int64_t num_experts)
      : backend_(backend), experts_(experts), hidden_(hidden), num_experts_(num_experts) {}
  void start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) override;
  void finish(int mb, float* out) override;
  const MoePhaseTimes& times() const override { return times_; }
  bool wants_hints() const override { return experts_.wants_hints(); }
  void hint(int64_t layer, const std::vector<int64_t>& rows) override { experts_.hint(layer, rows); }

 private:
  struct Pending {
    int64_t layer = 0;
    const float* x = nullptr;
    int64_t T = 0;
    router::RoutingDecision r;
  };
  experts::ExpertBackend& backend_;
  experts::ExpertStore& experts_;
  int64_t hidden_;
  int64_t num_experts_;
  std::vector<Pending> pending_;
  MoePhaseTimes times_;
};

}  // namespace moerun::runtime

// MoeLayer: what the router-side forward pass calls for the expert part of a layer. The single-
// process implementation (LocalMoeLayer) runs the experts in-process; the distributed one dispatches
// rows to expert ranks and combines their results. Both combine in slot order, so they agree.
#pragma once
#include <cstdint>

#include "base/aligned_buffer.hpp"
#include "base/matmul.hpp"
#include "experts/cpu/expert_ffn.hpp"
#include "experts/resident_experts.hpp"
#include "router/dispatch_plan.hpp"
#include "router/gate.hpp"

namespace moerun::runtime {

// Seconds spent per phase of the MoE part (for bench and stats).
struct MoePhaseTimes {
  double permute = 0;
  double experts = 0;
  double combine = 0;
};

class MoeLayer {
 public:
  virtual ~MoeLayer() = default;
  // out[T, d] = sum over slots of weight * expert(x[token]) for the routing decision r.
  virtual void forward(int64_t layer, const float* x, int64_t T, const router::RoutingDecision& r, float* out) = 0;
  virtual const MoePhaseTimes& times() const = 0;
};

class LocalMoeLayer final : public MoeLayer {
 public:
  LocalMoeLayer(Matmul& mm, const experts::ResidentExperts& experts, int64_t hidden, int64_t num_experts)
      : mm_(mm), experts_(experts), hidden_(hidden), num_experts_(num_experts) {}
  void forward(int64_t layer, const float* x, int64_t T, const router::RoutingDecision& r, float* out) override;
  const MoePhaseTimes& times() const override { return times_; }

 private:
  Matmul& mm_;
  const experts::ResidentExperts& experts_;
  int64_t hidden_;
  int64_t num_experts_;
  AlignedBuffer gathered_, results_;
  experts::ExpertScratch scratch_;
  MoePhaseTimes times_;
};

}  // namespace moerun::runtime

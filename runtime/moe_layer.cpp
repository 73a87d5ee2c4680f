// Single-process MoE layer: plan, permute, one SwiGLU FFN per expert with rows, combine.
#include "runtime/moe_layer.hpp"

#include <chrono>

namespace moerun::runtime {
namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

void LocalMoeLayer::forward(int64_t layer, const float* x, int64_t T, const router::RoutingDecision& r, float* out) {
  const int64_t d = hidden_;
  double t0 = now();
  const router::DispatchPlan plan = router::DispatchPlan::build(r.expert.data(), T, r.top_k, num_experts_);
  gathered_.resize(static_cast<std::size_t>(plan.rows() * d) * sizeof(float));
  results_.resize(gathered_.size());
  router::permute_rows(x, d, plan, gathered_.as<float>());
  double t1 = now();
  for (int64_t e = 0; e < num_experts_; ++e) {
    const int64_t rows = plan.rows_of(e);
    if (rows == 0) continue;
    const int64_t off = plan.offset[e] * d;
    experts::expert_ffn_forward(mm_, gathered_.as<float>() + off, rows, experts_.get(layer, e), results_.as<float>() + off,
                                scratch_);
  }
  double t2 = now();
  router::combine_rows(results_.as<float>(), d, plan, r.weight.data(), out);
  double t3 = now();
  times_.permute += t1 - t0;
  times_.experts += t2 - t1;
  times_.combine += t3 - t2;
}

}  // namespace moerun::runtime

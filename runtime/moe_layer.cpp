// Single-process MoE layer: plan, permute, one SwiGLU FFN per expert with rows, combine.
#include "runtime/moe_layer.hpp"

#include <chrono>

namespace moerun::runtime {
namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void run_local_experts(experts::ExpertBackend& backend, experts::ExpertStore& store, int64_t layer, const router::DispatchPlan& plan,
                       const float* gathered, float* results) {
  std::vector<int64_t> rows(static_cast<std::size_t>(plan.num_experts));
  for (int64_t e = 0; e < plan.num_experts; ++e) rows[static_cast<std::size_t>(e)] = plan.rows_of(e);
  backend.begin(gathered, plan.rows(), results);
  if (store.holds_all()) {  // nothing to wait for: the backend gets the whole layer
    std::vector<experts::ExpertRun> runs;
    for (int64_t e : store.begin_layer(layer, rows))
      runs.push_back({&store.acquire(layer, e), plan.offset[e], rows[static_cast<std::size_t>(e)]});
    backend.run_all(runs);
    backend.finish();
    return;
  }
  // The store orders the experts: those already in memory first, while the others load.
  for (int64_t e : store.begin_layer(layer, rows)) {
    backend.run({&store.acquire(layer, e), plan.offset[e], rows[static_cast<std::size_t>(e)]});
    store.release(layer, e);
  }
  backend.finish();
}

void LocalMoeLayer::start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) {
  if (static_cast<int>(pending_.size()) <= mb) pending_.resize(static_cast<std::size_t>(mb + 1));
  pending_[static_cast<std::size_t>(mb)] = {layer, x, T, r};
}

void LocalMoeLayer::finish(int mb, float* out) {
  const Pending& p = pending_[static_cast<std::size_t>(mb)];
  const int64_t d = hidden_;
  double t0 = now();
  const router::DispatchPlan plan = router::DispatchPlan::build(p.r.expert.data(), p.T, p.r.top_k, num_experts_);
  const experts::RowBuffers rows = backend_.row_buffers(plan.rows());
  router::permute_rows(p.x, d, plan, rows.gathered);
  double t1 = now();
  run_local_experts(backend_, experts_, p.layer, plan, rows.gathered, rows.results);
  double t2 = now();
  router::combine_rows(rows.results, d, plan, p.r.weight.data(), out);
  double t3 = now();
  times_.pack += t1 - t0;
  times_.experts += t2 - t1;
  times_.combine += t3 - t2;
}

}  // namespace moerun::runtime

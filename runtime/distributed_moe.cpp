// Router- and expert-side halves of the distributed MoE layer.
#include "runtime/distributed_moe.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.hpp"

namespace moerun::runtime {
namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
std::string label(const char* dir, int64_t layer, int mb) { return str(dir, " of layer ", layer, " micro-batch ", mb); }
}  // namespace

MoeExchangePatterns moe_exchange_patterns(const comm::Topology& topo, int rank) {
  MoeExchangePatterns m;
  const auto n = static_cast<std::size_t>(topo.world_size);
  m.forward.sends_to.assign(n, 0);
  m.forward.receives_from.assign(n, 0);
  for (int q = 0; q < topo.world_size; ++q) {
    m.forward.sends_to[q] = topo.is_router(rank) && topo.is_expert(q);
    m.forward.receives_from[q] = topo.is_expert(rank) && topo.is_router(q);
  }
  m.backward.sends_to = m.forward.receives_from;
  m.backward.receives_from = m.forward.sends_to;
  return m;
}

DistributedMoeLayer::DistributedMoeLayer(comm::AllToAllV& dispatch, comm::AllToAllV& combine,
                                         const experts::Placement& placement, int64_t hidden, int64_t num_experts,
                                         MoeExchangePatterns pattern)
    : dispatch_(dispatch), combine_(combine), placement_(placement), hidden_(hidden), num_experts_(num_experts),
      pattern_(std::move(pattern)) {}

void DistributedMoeLayer::start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) {
  double t0 = now();
  if (static_cast<int>(mbs_.size()) <= mb) mbs_.resize(static_cast<std::size_t>(mb + 1));
  InFlight& f = mbs_[static_cast<std::size_t>(mb)];
  const int P = dispatch_.size();
  const int64_t d = hidden_, k = r.top_k;
  f.layer = layer;
  f.T = T;
  f.top_k = k;
  f.weight = r.weight;
  const router::DispatchPlan plan = router::DispatchPlan::build(r.expert.data(), T, k, num_experts_);
  // Experts in (owner, id) order: rows for one destination are contiguous, grouped by expert.
  std::vector<int32_t> order(static_cast<std::size_t>(num_experts_));
  for (int64_t e = 0; e < num_experts_; ++e) order[e] = static_cast<int32_t>(e);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return placement_.owner_of(layer, a) < placement_.owner_of(layer, b);
  });
  f.rows_to.assign(static_cast<std::size_t>(P), 0);
  std::vector<int64_t> plan_row_to_send(static_cast<std::size_t>(plan.rows()), -1);
  const std::size_t rec = dispatch_record_bytes(d);
  f.send.resize(static_cast<std::size_t>(plan.rows()) * rec);
  int64_t next = 0;
  for (int32_t e : order) {
    const int owner = placement_.owner_of(layer, e);
    for (int64_t pr = plan.offset[e]; pr < plan.offset[e + 1]; ++pr) {
      char* dst = f.send.data() + static_cast<std::size_t>(next) * rec;
      std::memcpy(dst, &e, 4);
      std::memcpy(dst + 4, x + static_cast<int64_t>(plan.row_token[pr]) * d, static_cast<std::size_t>(d) * 4);
      plan_row_to_send[pr] = next++;
      ++f.rows_to[owner];
    }
  }
  f.slot_row.assign(static_cast<std::size_t>(T * k), -1);
  for (int64_t s = 0; s < T * k; ++s)
    if (plan.slot_row[s] >= 0) f.slot_row[s] = plan_row_to_send[plan.slot_row[s]];
  double t1 = now();
  std::vector<int64_t> send_bytes(static_cast<std::size_t>(P)), recv_bytes;
  for (int p = 0; p < P; ++p) send_bytes[p] = f.rows_to[p] * static_cast<int64_t>(rec);
  dispatch_.exchange_counts(send_bytes, recv_bytes, label("dispatch", layer, mb), pattern_.forward);
  f.pending = dispatch_.start(f.send.data(), send_bytes, nullptr, recv_bytes, label("dispatch", layer, mb));
  double t2 = now();
  times_.pack += t1 - t0;
  times_.exchange += t2 - t1;
}

void DistributedMoeLayer::finish(int mb, float* out) {
  InFlight& f = mbs_[static_cast<std::size_t>(mb)];
  const int P = combine_.size();
  const int64_t d = hidden_;
  double t0 = now();
  dispatch_.wait(*f.pending);
  double tw = now();
  int64_t total = 0;
  std::vector<int64_t> send_bytes(static_cast<std::size_t>(P), 0), recv_bytes;
  for (int p = 0; p < P; ++p) total += f.rows_to[p];
  combine_.exchange_counts(send_bytes, recv_bytes, label("combine", f.layer, mb), pattern_.backward);
  for (int p = 0; p < P; ++p)
    if (recv_bytes[p] != f.rows_to[p] * d * 4)
      fail(ErrorKind::Comm, "combine of layer ", f.layer, ": rank ", p, " returns ", recv_bytes[p], " bytes for ", f.rows_to[p], " rows");
  // Results land in the transport's receive buffer (shared memory for hier): combined from there.
  auto* reply = static_cast<float*>(combine_.recv_buffer(static_cast<std::size_t>(total * d) * 4));
  auto pending = combine_.start(nullptr, send_bytes, reply, recv_bytes, label("combine", f.layer, mb));
  combine_.wait(*pending);
  double t1 = now();
  times_.exchange += tw - t0;
  times_.wait += t1 - tw;
  router::DispatchPlan view;  // combine_rows only needs tokens, top_k and slot_row
  view.tokens = f.T;
  view.top_k = f.top_k;
  view.slot_row = f.slot_row;
  router::combine_rows(reply, d, view, f.weight.data(), out);
  times_.combine += now() - t1;
}

ExpertServer::ExpertServer(comm::AllToAllV& dispatch, comm::AllToAllV& combine, experts::ExpertBackend& backend,
                           experts::ExpertStore& store, int64_t hidden, int64_t num_experts,
                           MoeExchangePatterns pattern)
    : dispatch_(dispatch), combine_(combine), backend_(backend), store_(store), hidden_(hidden), num_experts_(num_experts),
      pattern_(std::move(pattern)) {}

void ExpertServer::serve_layer(int64_t layer, int micro_batches) {
  const int P = dispatch_.size();
  const int64_t d = hidden_;
  const std::size_t rec = dispatch_record_bytes(d);
  replies_.resize(static_cast<std::size_t>(micro_batches));
  const std::vector<int64_t> none(static_cast<std::size_t>(P), 0);
  // All dispatches of the layer first, then all replies: every rank issues the exchanges of one
  // communicator in the same order, which a synchronous (hierarchical) exchange requires. The
  // router's attention on micro-batch i+1 still overlaps this rank's compute on micro-batch i.
  for (int mb = 0; mb < micro_batches; ++mb) {
    double t0 = now();
    std::vector<int64_t> recv_bytes;
    dispatch_.exchange_counts(none, recv_bytes, label("dispatch", layer, mb), pattern_.forward);
    int64_t rows = 0;
    Reply& rep = replies_[static_cast<std::size_t>(mb)];
    rep.rows_from.assign(static_cast<std::size_t>(P), 0);
    for (int p = 0; p < P; ++p) {
      rep.rows_from[p] = recv_bytes[p] / static_cast<int64_t>(rec);
      rows += rep.rows_from[p];
    }
    // Rows land in the transport's receive buffer (shared memory for hier) and are gathered from it.
    const char* rbuf = static_cast<const char*>(dispatch_.recv_buffer(static_cast<std::size_t>(rows) * rec));
    auto in = dispatch_.start(nullptr, none, const_cast<char*>(rbuf), recv_bytes, label("dispatch", layer, mb));
    dispatch_.wait(*in);
    double t1 = now();
    // Group arrivals by expert (stable: source rank, then the router's order), as a DispatchPlan
    // whose "tokens" are the arrival rows and top_k is 1.
    std::vector<int32_t> expert(static_cast<std::size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(&expert[i], rbuf + static_cast<std::size_t>(i) * rec, 4);
      if (expert[i] < 0 || expert[i] >= num_experts_ || !store_.owns(layer, expert[i]))
        fail(ErrorKind::Internal, "received a row for expert (", layer, ", ", expert[i], ") which this rank does not hold");
    }
    const router::DispatchPlan plan = router::DispatchPlan::build(expert.data(), rows, 1, num_experts_);
    gathered_.resize(static_cast<std::size_t>(rows * d) * 4);
    results_.resize(gathered_.size());
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(gathered_.as<float>() + r * d, rbuf + static_cast<std::size_t>(plan.row_token[r]) * rec + 4,
                  static_cast<std::size_t>(d) * 4);
    double t2 = now();
    run_local_experts(backend_, store_, layer, plan, gathered_.as<float>(), results_.as<float>());
    double t3 = now();
    rep.data.resize(static_cast<std::size_t>(rows * d));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(rep.data.data() + static_cast<int64_t>(plan.row_token[r]) * d, results_.as<float>() + r * d,
                  static_cast<std::size_t>(d) * 4);
    times_.exchange += t1 - t0;
    times_.pack += (t2 - t1) + (now() - t3);
    times_.experts += t3 - t2;
  }
  double t4 = now();
  for (int mb = 0; mb < micro_batches; ++mb) {
    Reply& rep = replies_[static_cast<std::size_t>(mb)];
    std::vector<int64_t> send_bytes(static_cast<std::size_t>(P)), ignored;
    for (int p = 0; p < P; ++p) send_bytes[p] = rep.rows_from[p] * d * 4;
    combine_.exchange_counts(send_bytes, ignored, label("combine", layer, mb), pattern_.backward);
    rep.pending = combine_.start(rep.data.data(), send_bytes, nullptr, none, label("combine", layer, mb));
  }
  for (Reply& rep : replies_) combine_.wait(*rep.pending);
  times_.exchange += now() - t4;
}

}  // namespace moerun::runtime

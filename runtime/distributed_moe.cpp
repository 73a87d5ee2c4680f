// Router- and expert-side halves of the distributed MoE layer.
#include "runtime/distributed_moe.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.hpp"

namespace moerun::runtime {
namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
using Phase = MoeExchangeProtocol::Phase;
}  // namespace

DistributedMoeLayer::DistributedMoeLayer(MoeExchangeProtocol& protocol, const experts::Placement& placement,
                                         int64_t num_experts)
    : protocol_(protocol), placement_(placement), num_experts_(num_experts) {}

void DistributedMoeLayer::start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) {
  double t0 = now();
  if (static_cast<int>(mbs_.size()) <= mb) mbs_.resize(static_cast<std::size_t>(mb + 1));
  InFlight& f = mbs_[static_cast<std::size_t>(mb)];
  const int P = protocol_.ranks();
  const int64_t d = protocol_.hidden(), k = r.top_k;
  f.layer = layer;
  f.weight = r.weight;
  const router::DispatchPlan plan = router::DispatchPlan::build(r.expert.data(), T, k, num_experts_);
  // Experts in (owner, id) order: rows for one destination are contiguous, grouped by expert.
  std::vector<int32_t> order(static_cast<std::size_t>(num_experts_));
  for (int64_t e = 0; e < num_experts_; ++e) order[e] = static_cast<int32_t>(e);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return placement_.owner_of(layer, a) < placement_.owner_of(layer, b);
  });
  f.rows_to.assign(static_cast<std::size_t>(P), 0);
  for (int64_t e = 0; e < num_experts_; ++e) f.rows_to[placement_.owner_of(layer, e)] += plan.rows_of(e);
  double t1 = now();
  f.dispatch = protocol_.open(Phase::Dispatch, layer, mb, f.rows_to);
  double t2 = now();
  // The records go straight into the exchange's send buffer (hier: the node's shared window).
  const std::size_t rec = MoeExchangeProtocol::dispatch_record_bytes(d);
  char* send = f.dispatch->send_as<char>();
  std::vector<int64_t> plan_row_to_send(static_cast<std::size_t>(plan.rows()), -1);
  int64_t next = 0;
  for (int32_t e : order)
    for (int64_t pr = plan.offset[e]; pr < plan.offset[e + 1]; ++pr) {
      char* dst = send + static_cast<std::size_t>(next) * rec;
      std::memcpy(dst, &e, 4);
      std::memcpy(dst + 4, x + static_cast<int64_t>(plan.row_token[pr]) * d, static_cast<std::size_t>(d) * 4);
      plan_row_to_send[pr] = next++;
    }
  // The dispatch's layout, kept for the combine: the plan with each slot's row in send order.
  f.layout = plan;
  for (int64_t s = 0; s < T * k; ++s)
    if (plan.slot_row[s] >= 0) f.layout.slot_row[s] = plan_row_to_send[plan.slot_row[s]];
  double t3 = now();
  f.dispatch->post();
  double t4 = now();
  times_.pack += (t1 - t0) + (t3 - t2);
  times_.exchange += (t2 - t1) + (t4 - t3);
}

void DistributedMoeLayer::finish(int mb, float* out) {
  InFlight& f = mbs_[static_cast<std::size_t>(mb)];
  const int P = protocol_.ranks();
  const int64_t d = protocol_.hidden();
  double t0 = now();
  f.dispatch->wait();
  f.dispatch.reset();
  double tw = now();
  // Results land in the exchange's receive buffer (hier: the node's shared window): combined from there.
  // Each expert rank returns the rows it was sent: the dispatch's counts are the combine's.
  auto reply = protocol_.open_combine(f.layer, mb, std::vector<int64_t>(static_cast<std::size_t>(P), 0), f.rows_to);
  reply->post();
  reply->wait();
  double t1 = now();
  times_.exchange += tw - t0;
  times_.wait += t1 - tw;
  router::combine_rows(reply->recv_as<float>(), d, f.layout, f.weight.data(), out);
  times_.combine += now() - t1;
}

ExpertServer::ExpertServer(MoeExchangeProtocol& protocol, experts::ExpertBackend& backend, experts::ExpertStore& store,
                           int64_t num_experts)
    : protocol_(protocol), backend_(backend), store_(store), num_experts_(num_experts) {}

void ExpertServer::serve_layer(int64_t layer, int micro_batches) {
  const int P = protocol_.ranks();
  const int64_t d = protocol_.hidden();
  const std::size_t rec = MoeExchangeProtocol::dispatch_record_bytes(d);
  replies_.resize(static_cast<std::size_t>(micro_batches));
  const std::vector<int64_t> none(static_cast<std::size_t>(P), 0);
  double t4 = 0;
  for (const MoeExchangeProtocol::Step& step : MoeExchangeProtocol::layer_steps(micro_batches)) {
    Reply& rep = replies_[static_cast<std::size_t>(step.micro_batch)];
    if (step.phase == Phase::Combine) {
      if (t4 == 0) t4 = now();
      rep.pending = protocol_.open_combine(layer, step.micro_batch, rep.rows_from, none, rep.data.data());
      rep.pending->post();
      continue;
    }
    // The router's attention on micro-batch i+1 overlaps this rank's compute on micro-batch i.
    double t0 = now();
    auto in = protocol_.open(Phase::Dispatch, layer, step.micro_batch, none);
    rep.rows_from = protocol_.rows_from(*in, Phase::Dispatch);
    in->post();
    in->wait();
    int64_t rows = 0;
    for (int64_t r : rep.rows_from) rows += r;
    double t1 = now();
    // Rows are read where they landed (hier: the node's shared window). Grouped by expert (stable:
    // source rank, then the router's order), as a DispatchPlan whose "tokens" are the arrival rows
    // and top_k is 1.
    const char* rbuf = in->recv_as<char>();
    std::vector<int32_t> expert(static_cast<std::size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) {
      std::memcpy(&expert[i], rbuf + static_cast<std::size_t>(i) * rec, 4);
      if (expert[i] < 0 || expert[i] >= num_experts_ || !store_.owns(layer, expert[i]))
        fail(ErrorKind::Internal, "received a row for expert (", layer, ", ", expert[i], ") which this rank does not hold");
    }
    const router::DispatchPlan plan = router::DispatchPlan::build(expert.data(), rows, 1, num_experts_);
    const experts::RowBuffers io = backend_.row_buffers(rows);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(io.gathered + r * d, rbuf + static_cast<std::size_t>(plan.row_token[r]) * rec + 4,
                  static_cast<std::size_t>(d) * 4);
    double t2 = now();
    run_local_experts(backend_, store_, layer, plan, io.gathered, io.results);
    double t3 = now();
    rep.data.resize(static_cast<std::size_t>(rows * d));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(rep.data.data() + static_cast<int64_t>(plan.row_token[r]) * d, io.results + r * d,
                  static_cast<std::size_t>(d) * 4);
    times_.exchange += t1 - t0;
    times_.pack += (t2 - t1) + (now() - t3);
    times_.experts += t3 - t2;
  }
  for (Reply& rep : replies_) rep.pending->wait();
  times_.exchange += now() - t4;
}

}  // namespace moerun::runtime

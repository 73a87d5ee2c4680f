// Router- and expert-side halves of the distributed MoE layer.
#include "runtime/distributed_moe.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "base/error.hpp"
#include "comm/collectives.hpp"
#include "experts/replica_split.hpp"

namespace moerun::runtime {
namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
using Phase = MoeExchangeProtocol::Phase;
}  // namespace

DistributedMoeLayer::DistributedMoeLayer(MoeExchangeProtocol& protocol, const experts::Placement& placement, int64_t num_experts,
                                         RouterGroup group, bool hints)
    : protocol_(protocol),
      placement_(placement),
      num_experts_(num_experts),
      group_(group),
      hints_(hints && num_experts <= protocol.hidden()) {}

void DistributedMoeLayer::hint(int64_t layer, const std::vector<int64_t>& rows) {
  hint_layer_ = layer;
  hint_rows_ = rows;
}

void DistributedMoeLayer::write_hint(char* dst) const {
  const int32_t id = MoeExchangeProtocol::kHintRecord;
  std::memcpy(dst, &id, 4);
  std::vector<float> v(static_cast<std::size_t>(protocol_.hidden()), 0.0f);
  for (std::size_t e = 0; e < hint_rows_.size() && e < v.size(); ++e) v[e] = static_cast<float>(hint_rows_[e]);
  std::memcpy(dst + 4, v.data(), v.size() * 4);
}

std::vector<DistributedMoeLayer::Piece> DistributedMoeLayer::pieces(int64_t layer, const router::DispatchPlan& plan) {
  std::vector<Piece> out;
  if (!placement_.has_replicas(layer)) {
    for (int64_t e = 0; e < num_experts_; ++e)
      if (plan.rows_of(e) > 0) out.push_back({placement_.owner_of(layer, e), static_cast<int32_t>(e), 0, plan.rows_of(e)});
    return out;
  }
  // Every router's rows of each expert: the totals to split, and where this router's rows start.
  std::vector<int64_t> mine(static_cast<std::size_t>(num_experts_));
  for (int64_t e = 0; e < num_experts_; ++e) mine[e] = plan.rows_of(e);
  const std::vector<int64_t> all =
      group_.comm == MPI_COMM_NULL ? mine : comm::allgather_timed(mine, group_.comm, group_.timeout_s, "the routers' rows per expert");
  std::vector<int64_t> totals(static_cast<std::size_t>(num_experts_), 0), first(static_cast<std::size_t>(num_experts_), 0);
  for (std::size_t r = 0; r * mine.size() < all.size(); ++r)
    for (int64_t e = 0; e < num_experts_; ++e) {
      const int64_t n = all[r * mine.size() + static_cast<std::size_t>(e)];
      totals[e] += n;
      if (static_cast<int>(r) < group_.index) first[e] += n;
    }
  const experts::ReplicaSplit split = experts::split_among_holders(
      totals, &placement_.holders[static_cast<std::size_t>(layer * num_experts_)], protocol_.ranks(), group_.granule);
  for (int64_t e = 0; e < num_experts_; ++e)
    experts::for_each_piece(split.parts[e], first[e], mine[e], [&](int rank, int64_t b, int64_t en) {
      out.push_back({rank, static_cast<int32_t>(e), b, en});
    });
  return out;
}

void DistributedMoeLayer::count(int64_t layer, const router::DispatchPlan& plan, const std::vector<Piece>& pieces) {
  const auto need = static_cast<std::size_t>((layer + 1) * num_experts_);
  if (routed_.per_expert.size() < need) routed_.per_expert.resize(need, 0);
  for (int64_t e = 0; e < num_experts_; ++e) routed_.per_expert[static_cast<std::size_t>(layer * num_experts_ + e)] += plan.rows_of(e);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.rank != placement_.owner_of(layer, p.expert)) routed_.to_replicas += p.end - p.begin;
    // Pieces come in expert order: an expert's second piece marks a split.
    if (i > 0 && pieces[i - 1].expert == p.expert && (i < 2 || pieces[i - 2].expert != p.expert)) ++routed_.split;
  }
}

void DistributedMoeLayer::start(int64_t layer, int mb, const float* x, int64_t T, const router::RoutingDecision& r) {
  double t0 = now();
  if (static_cast<int>(mbs_.size()) <= mb) mbs_.resize(static_cast<std::size_t>(mb + 1));
  InFlight& f = mbs_[static_cast<std::size_t>(mb)];
  const int P = protocol_.ranks();
  const int64_t d = protocol_.hidden(), k = r.top_k;
  f.layer = layer;
  f.weight = r.weight;
  const router::DispatchPlan plan = router::DispatchPlan::build(r.expert.data(), T, k, num_experts_);
  double tg = now();
  // Rows for one destination are contiguous, grouped by expert (an expert's pieces in row order).
  std::vector<Piece> order = pieces(layer, plan);
  double th = now();
  count(layer, plan, order);
  std::stable_sort(order.begin(), order.end(),
                   [](const Piece& a, const Piece& b) { return a.rank != b.rank ? a.rank < b.rank : a.expert < b.expert; });
  f.rows_to.assign(static_cast<std::size_t>(P), 0);
  for (const Piece& p : order) f.rows_to[p.rank] += p.end - p.begin;
  f.replies = f.rows_to;
  // The gate prefetch's prediction for the next layer, one record to each rank holding a hinted expert.
  std::vector<uint8_t> hint_to(static_cast<std::size_t>(P), 0);
  if (hint_layer_ == layer + 1)
    for (int64_t e = 0; e < num_experts_ && e < static_cast<int64_t>(hint_rows_.size()); ++e)
      if (hint_rows_[static_cast<std::size_t>(e)] > 0) hint_to[static_cast<std::size_t>(placement_.owner_of(hint_layer_, e))] = 1;
  for (int p = 0; p < P; ++p) f.rows_to[p] += hint_to[static_cast<std::size_t>(p)];
  double t1 = now();
  f.dispatch = protocol_.open(Phase::Dispatch, layer, mb, f.rows_to);
  double t2 = now();
  // The records go straight into the exchange's send buffer (hier: the node's shared window).
  const std::size_t rec = MoeExchangeProtocol::dispatch_record_bytes(d);
  char* send = f.dispatch->send_as<char>();
  std::vector<int64_t> plan_row_to_send(static_cast<std::size_t>(plan.rows()), -1);
  int64_t next = 0, sent = 0;  // records written; rows among them (the combine's numbering)
  std::size_t piece = 0;
  for (int rank = 0; rank < P; ++rank) {
    for (; piece < order.size() && order[piece].rank == rank; ++piece) {
      const Piece& p = order[piece];
      for (int64_t pr = plan.offset[p.expert] + p.begin; pr < plan.offset[p.expert] + p.end; ++pr) {
        char* dst = send + static_cast<std::size_t>(next++) * rec;
        std::memcpy(dst, &p.expert, 4);
        std::memcpy(dst + 4, x + static_cast<int64_t>(plan.row_token[pr]) * d, static_cast<std::size_t>(d) * 4);
        plan_row_to_send[pr] = sent++;
      }
    }
    if (hint_to[static_cast<std::size_t>(rank)]) write_hint(send + static_cast<std::size_t>(next++) * rec);
  }
  hint_layer_ = -1;
  // The dispatch's layout, kept for the combine: the plan with each slot's row in send order.
  f.layout = plan;
  for (int64_t s = 0; s < T * k; ++s)
    if (plan.slot_row[s] >= 0) f.layout.slot_row[s] = plan_row_to_send[plan.slot_row[s]];
  double t3 = now();
  f.dispatch->post();
  double t4 = now();
  times_.pack += (tg - t0) + (t1 - th) + (t3 - t2);
  times_.exchange += (th - tg) + (t2 - t1) + (t4 - t3);
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
  auto reply = protocol_.open_combine(f.layer, mb, std::vector<int64_t>(static_cast<std::size_t>(P), 0), f.replies);
  reply->post();
  reply->wait();
  double t1 = now();
  times_.exchange += tw - t0;
  times_.wait += t1 - tw;
  ++times_.exchanges;
  router::combine_rows(reply->recv_as<float>(), d, f.layout, f.weight.data(), out);
  times_.combine += now() - t1;
}

ExpertServer::ExpertServer(MoeExchangeProtocol& protocol, experts::ExpertBackend& backend, experts::ExpertStore& store, int64_t num_experts)
    : protocol_(protocol), backend_(backend), store_(store), num_experts_(num_experts) {}

void ExpertServer::serve_layer(int64_t layer, int micro_batches) {
  const int P = protocol_.ranks();
  const int64_t d = protocol_.hidden();
  const std::size_t rec = MoeExchangeProtocol::dispatch_record_bytes(d);
  replies_.resize(static_cast<std::size_t>(micro_batches));
  const std::vector<int64_t> none(static_cast<std::size_t>(P), 0);
  double t4 = 0;
  int64_t received = 0;
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
    double t1 = now();
    // Rows are read where they landed (hier: the node's shared window). Grouped by expert (stable:
    // source rank, then the router's order), as a DispatchPlan whose "tokens" are the rows in
    // arrival order (hint records set apart) and top_k is 1.
    const char* rbuf = in->recv_as<char>();
    std::vector<int32_t> expert;
    std::vector<int64_t> record;  // each row's record
    int64_t i = 0;
    for (std::size_t peer = 0; peer < rep.rows_from.size(); ++peer) {
      const int64_t n = rep.rows_from[peer];
      for (int64_t j = 0; j < n; ++j, ++i) {
        int32_t id;
        std::memcpy(&id, rbuf + static_cast<std::size_t>(i) * rec, 4);
        if (id == MoeExchangeProtocol::kHintRecord) {
          take_hint(rbuf + static_cast<std::size_t>(i) * rec + 4, d);
          --rep.rows_from[peer];  // no reply for it
          continue;
        }
        if (id < 0 || id >= num_experts_)
          fail(ErrorKind::Internal, "received a row for expert (", layer, ", ", id, "), not an expert of the model");
        expert.push_back(id);
        record.push_back(i);
      }
    }
    const auto rows = static_cast<int64_t>(expert.size());
    received += rows;
    if (!hinted_.empty()) store_.hint(layer + 1, std::exchange(hinted_, {}));
    const router::DispatchPlan plan = router::DispatchPlan::build(expert.data(), rows, 1, num_experts_);
    for (int64_t e = 0; e < num_experts_; ++e)
      if (plan.rows_of(e) > 0 && !store_.owns(layer, e))
        fail(ErrorKind::Internal, "received rows for expert (", layer, ", ", e, ") which this rank does not hold");
    const experts::RowBuffers io = backend_.row_buffers(rows);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(io.gathered + r * d, rbuf + static_cast<std::size_t>(record[static_cast<std::size_t>(plan.row_token[r])]) * rec + 4,
                  static_cast<std::size_t>(d) * 4);
    double t2 = now();
    run_local_experts(backend_, store_, layer, plan, io.gathered, io.results);
    double t3 = now();
    rep.data.resize(static_cast<std::size_t>(rows * d));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(rep.data.data() + static_cast<int64_t>(plan.row_token[r]) * d, io.results + r * d, static_cast<std::size_t>(d) * 4);
    times_.exchange += t1 - t0;
    times_.pack += (t2 - t1) + (now() - t3);
    times_.experts += t3 - t2;
  }
  for (Reply& rep : replies_) rep.pending->wait();
  times_.exchange += now() - t4;
  layer_rows_.push_back(received);
}

void ExpertServer::take_hint(const char* floats, int64_t d) {
  hinted_.resize(static_cast<std::size_t>(num_experts_), 0);
  for (int64_t e = 0; e < num_experts_ && e < d; ++e) {
    float v;
    std::memcpy(&v, floats + e * 4, 4);
    hinted_[static_cast<std::size_t>(e)] += static_cast<int64_t>(v);
  }
}

}  // namespace moerun::runtime

// The distributed MoE layer's exchange protocol.
#include "runtime/moe_protocol.hpp"

#include "base/error.hpp"

namespace moerun::runtime {

std::vector<MoeExchangeProtocol::Step> MoeExchangeProtocol::layer_steps(int micro_batches) {
  std::vector<Step> steps;
  for (int mb = 0; mb < micro_batches; ++mb) steps.push_back({Phase::Dispatch, mb});
  for (int mb = 0; mb < micro_batches; ++mb) steps.push_back({Phase::Combine, mb});
  return steps;
}

MoeExchangeProtocol::MoeExchangeProtocol(comm::AllToAllV& dispatch, comm::AllToAllV& combine, const comm::Topology& topo, int rank,
                                         int64_t hidden)
    : dispatch_(dispatch), combine_(combine), hidden_(hidden) {
  const auto n = static_cast<std::size_t>(topo.world_size);
  forward_.sends_to.assign(n, 0);
  forward_.receives_from.assign(n, 0);
  for (int q = 0; q < topo.world_size; ++q) {
    forward_.sends_to[q] = topo.is_router(rank) && topo.is_expert(q);
    forward_.receives_from[q] = topo.is_expert(rank) && topo.is_router(q);
  }
  backward_.sends_to = forward_.receives_from;
  backward_.receives_from = forward_.sends_to;
}

void MoeExchangeProtocol::next_step(Phase phase, int64_t layer, int mb) {
  const char* name = phase == Phase::Dispatch ? "dispatch" : "combine";
  bool ok;
  if (phase == Phase::Dispatch && dispatched_ == combined_ && mb == 0) {  // a new layer (or the same, next step)
    layer_ = layer;
    dispatched_ = combined_ = 0;
    ok = true;
  } else if (phase == Phase::Dispatch) {
    ok = layer == layer_ && combined_ == 0 && mb == dispatched_;
  } else {
    ok = layer == layer_ && mb == combined_ && combined_ < dispatched_;
  }
  if (!ok)
    fail(ErrorKind::Internal, "MoE exchange out of protocol order: ", name, " of layer ", layer, " micro-batch ", mb, " after ",
         dispatched_, " dispatch(es) and ", combined_, " combine(s) of layer ", layer_);
  ++(phase == Phase::Dispatch ? dispatched_ : combined_);
}

std::unique_ptr<comm::ExchangeHandle> MoeExchangeProtocol::open(Phase phase, int64_t layer, int mb, const std::vector<int64_t>& rows_to,
                                                                const void* send_from) {
  next_step(phase, layer, mb);
  const bool d = phase == Phase::Dispatch;
  comm::AllToAllV& a2a = d ? dispatch_ : combine_;
  const auto rec = static_cast<int64_t>(record_bytes(phase));
  std::vector<int64_t> send_bytes(rows_to.size());
  for (std::size_t p = 0; p < rows_to.size(); ++p) send_bytes[p] = rows_to[p] * rec;
  comm::ExchangePlan plan =
      a2a.plan(std::move(send_bytes), str(d ? "dispatch" : "combine", " of layer ", layer, " micro-batch ", mb), d ? forward_ : backward_);
  for (std::size_t p = 0; p < plan.recv_bytes.size(); ++p)
    if (plan.recv_bytes[p] < 0 || plan.recv_bytes[p] % rec != 0)
      fail(ErrorKind::Comm, plan.what, ": rank ", p, " sends ", plan.recv_bytes[p], " bytes, not whole ", rec, "-byte records");
  return a2a.open(std::move(plan), mb, send_from);
}

std::unique_ptr<comm::ExchangeHandle> MoeExchangeProtocol::open_combine(int64_t layer, int mb, const std::vector<int64_t>& rows_to,
                                                                        const std::vector<int64_t>& rows_from, const void* send_from) {
  next_step(Phase::Combine, layer, mb);
  const auto rec = static_cast<int64_t>(record_bytes(Phase::Combine));
  std::vector<int64_t> send_bytes(rows_to.size()), recv_bytes(rows_from.size());
  for (std::size_t p = 0; p < rows_to.size(); ++p) send_bytes[p] = rows_to[p] * rec;
  for (std::size_t p = 0; p < rows_from.size(); ++p) recv_bytes[p] = rows_from[p] * rec;
  comm::ExchangePlan plan =
      combine_.plan_known(std::move(send_bytes), std::move(recv_bytes), str("combine of layer ", layer, " micro-batch ", mb), backward_);
  return combine_.open(std::move(plan), mb, send_from);
}

std::vector<int64_t> MoeExchangeProtocol::rows_from(const comm::ExchangeHandle& h, Phase phase) const {
  const auto rec = static_cast<int64_t>(record_bytes(phase));
  std::vector<int64_t> rows(h.plan().recv_bytes.size());
  for (std::size_t p = 0; p < rows.size(); ++p) rows[p] = h.plan().recv_bytes[p] / rec;
  return rows;
}

}  // namespace moerun::runtime

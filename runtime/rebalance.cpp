// Planning from live loads, preparing in the background, switching at an agreed step boundary.
#include "runtime/rebalance.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "base/log.hpp"
#include "comm/collectives.hpp"

namespace moerun::runtime {

Rebalancer::Rebalancer(RebalanceConfig cfg, const comm::Topology& topo, int rank, MPI_Comm world, double timeout_s, bool quiet)
    : cfg_(cfg), topo_(topo), rank_(rank), world_(world), timeout_s_(timeout_s), quiet_(quiet) {}

Rebalancer::~Rebalancer() {
  if (loader_.joinable()) loader_.join();
}

void Rebalancer::at_boundary(int64_t steps, const std::vector<int64_t>& routed, const HotSwap* swap, experts::Placement& placement,
                             experts::ExpertStore* store) {
  if (pending_) {
    switch_over(placement, store);
    return;
  }
  if (cfg_.every > 0 && steps > 0 && steps % cfg_.every == 0) plan(routed, swap, placement, store);
}

void Rebalancer::plan(const std::vector<int64_t>& routed, const HotSwap* swap, const experts::Placement& current,
                      experts::ExpertStore* store) {
  const int64_t L = current.num_layers, E = current.num_experts;
  std::vector<int64_t> rows(static_cast<std::size_t>(L * E), 0);
  for (std::size_t i = 0; i < routed.size() && i < rows.size(); ++i) rows[i] = routed[i] - (i < last_routed_.size() ? last_routed_[i] : 0);
  last_routed_ = routed;
  comm::allreduce_sum_timed(rows, world_, timeout_s_, "rebalancing: the routers' loads");
  const experts::ExpertLoads loads{L, E, rows};
  if (loads.total() == 0) return;
  ++c_.plans;
  // Every rank computes the same plan and the same decision from the same numbers.
  experts::PlacementPlan next = experts::plan_placement(loads, topo_, cfg_.plan);
  // Hot-swapped experts anywhere: the union over ranks.
  std::vector<int64_t> keep = swap ? swap->swapped_flags() : std::vector<int64_t>(rows.size(), 0);
  comm::allreduce_max_timed(keep, world_, timeout_s_, "rebalancing: hot-swapped experts");
  for (std::size_t i = 0; i < keep.size(); ++i)
    if (keep[i]) next.placement.holders[i] = current.holders[i];
  const double now = experts::overall_imbalance(experts::expected_balance(current, loads, topo_, cfg_.granule));
  const double then = experts::overall_imbalance(experts::expected_balance(next.placement, loads, topo_, cfg_.granule));
  if (!(then < (1.0 - cfg_.min_gain) * now)) return;
  if (rank_ == 0 && !quiet_)
    log::info("rebalancing: a placement with ", next.placement.replicas(), " replicas would take the busiest expert rank from ", now,
              "x to ", then, "x the mean on the last ", loads.total(), " rows; preparing it");
  pending_ = std::move(next.placement);
  adopt_.clear();
  if (!store) return;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e)
      if (pending_->holds(rank_, l, e) && !current.holds(rank_, l, e)) adopt_.emplace_back(l, e);
  loaded_ = false;
  errors_.clear();
  loader_ = std::thread([this, store] {
    errors_ = store->prepare(adopt_);
    loaded_ = true;
  });
}

void Rebalancer::switch_over(experts::Placement& placement, experts::ExpertStore* store) {
  std::vector<int64_t> busy{store && !loaded_ ? 1 : 0};
  comm::allreduce_max_timed(busy, world_, timeout_s_, "rebalancing: loads done");
  if (busy[0]) return;  // some rank still loads: steps go on with the current placement
  if (loader_.joinable()) loader_.join();
  // Copies that failed verification, as bits of their place in the new holder lists (at most 63).
  experts::Placement next = std::move(*pending_);
  pending_.reset();
  const int64_t E = next.num_experts;
  std::vector<int64_t> failed(next.holders.size(), 0);
  int64_t refused = 0;
  std::string first;
  for (std::size_t i = 0; i < adopt_.size(); ++i) {
    if (!errors_[i]) {
      ++c_.moves;
      continue;
    }
    const auto [l, e] = adopt_[i];
    const std::vector<int>& h = next.holders_of(l, e);
    const auto at = std::find(h.begin(), h.end(), rank_) - h.begin();
    failed[static_cast<std::size_t>(l * E + e)] |= int64_t{1} << std::min<int64_t>(at, 62);
    if (refused++ > 0) continue;
    try {
      std::rethrow_exception(errors_[i]);
    } catch (const std::exception& ex) {
      first = str("expert (", l, ", ", e, "): ", ex.what());
    }
  }
  // One warning per rank and switch: the copies stay with their other holders, or where they were.
  if (refused > 0)
    log::warn("rebalancing: rank ", rank_, " cannot take ", refused, " of its ", adopt_.size(), " new expert copies (first: ", first,
              "); their rows go to their other holders");
  comm::allreduce_sum_timed(failed, world_, timeout_s_, "rebalancing: failed copies");
  for (std::size_t k = 0; k < failed.size(); ++k) {
    if (!failed[k]) continue;
    std::vector<int>& h = next.holders[k];
    std::vector<int> kept;
    for (std::size_t j = 0; j < h.size(); ++j)
      if (!(failed[k] >> std::min<std::size_t>(j, 62) & 1)) kept.push_back(h[j]);
    c_.heals += static_cast<int64_t>(h.size() - kept.size());
    h = kept.empty() ? placement.holders[k] : kept;
  }
  if (store) {
    const std::vector<std::vector<int>> holders = next.holders;
    const int me = rank_;
    const int64_t experts = E;
    store->hold([holders, me, experts](int64_t l, int64_t e) {
      const std::vector<int>& h = holders[static_cast<std::size_t>(l * experts + e)];
      return std::find(h.begin(), h.end(), me) != h.end();
    });
  }
  placement = std::move(next);
  ++c_.rebalances;
}

}  // namespace moerun::runtime

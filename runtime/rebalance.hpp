// Rebalancing during a run (`--rebalance-every STEPS`, issue 27). Every STEPS steps the ranks sum
// the rows the routers routed to each (layer, expert) since the last plan, and every rank plans
// the same new placement from them (experts/placement_plan, with --redundant extra slots). It is
// taken only when it makes the expected busiest expert rank at least 5% lighter than the current
// placement would on the same loads. Then each expert rank reads and verifies the experts it is to
// hold next through its store's load path, on a background thread while steps go on; at the first
// step boundary where every rank is done, all switch together: routers split rows by the new
// placement, expert ranks drop what they no longer hold. Outputs do not change (replicas split
// rows at the backend's granule, experts/replica_split).
// Healing: an expert copy that fails verification while being prepared is left out of the new
// placement (one warning on its rank, counted); its rows go to its other holders, or, where it
// has none, it stays where it was.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <mpi.h>

#include "comm/topology.hpp"
#include "experts/expert_store.hpp"
#include "experts/placement_plan.hpp"
#include "runtime/hot_swap.hpp"

namespace moerun::runtime {

struct RebalanceConfig {
  int64_t every = 0;  // steps between plans (0: off)
  experts::PlacementPlanConfig plan;  // extra slots per layer, router groups, what a rank's memory holds
  double min_gain = 0.05;  // a plan is taken when the busiest rank gets this much lighter
  int64_t granule = 1;  // experts::replica_row_granule of the run
};

struct RebalanceCounters {
  int64_t plans = 0;  // placements planned
  int64_t rebalances = 0;  // of those, switched to
  int64_t moves = 0;  // experts this rank loaded for them
  int64_t heals = 0;  // copies that failed verification and were left out
};

class Rebalancer {
 public:
  Rebalancer(RebalanceConfig cfg, const comm::Topology& topo, int rank, MPI_Comm world, double timeout_s, bool quiet);
  ~Rebalancer();
  Rebalancer(const Rebalancer&) = delete;
  Rebalancer& operator=(const Rebalancer&) = delete;

  // At the step boundary after `steps` steps, on every rank (collective). `routed`: the rows this
  // router routed to each (layer, expert) so far (empty on expert ranks); `swap`: this rank's hot
  // swap, if any (the experts it swapped stay where they are: a new holder would read their old
  // weights); `store`: this rank's experts (null on routers). Changes `placement` in place when a
  // new one takes over.
  void at_boundary(int64_t steps, const std::vector<int64_t>& routed, const HotSwap* swap, experts::Placement& placement,
                   experts::ExpertStore* store);
  const RebalanceCounters& counters() const { return c_; }

 private:
  void plan(const std::vector<int64_t>& routed, const HotSwap* swap, const experts::Placement& current, experts::ExpertStore* store);
  void switch_over(experts::Placement& placement, experts::ExpertStore* store);

  RebalanceConfig cfg_;
  const comm::Topology& topo_;
  int rank_;
  MPI_Comm world_;
  double timeout_s_;
  bool quiet_;
  std::vector<int64_t> last_routed_;  // `routed` at the last plan
  // A planned placement being prepared: what this rank loads for it, on `loader_`.
  std::optional<experts::Placement> pending_;
  std::vector<std::pair<int64_t, int64_t>> adopt_;
  std::vector<std::exception_ptr> errors_;
  std::thread loader_;
  std::atomic<bool> loaded_{false};
  RebalanceCounters c_;
};

}  // namespace moerun::runtime

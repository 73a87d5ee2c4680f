// Expert-parallel balance, counted (issue 27): how many rows each expert rank received in every
// layer of every step, reduced to the busiest rank against the mean per layer (the imbalance ratio:
// an expert-parallel step is as slow as its busiest expert rank), with what replicas and
// rebalancing did. Gathered on rank 0 at the end of a distributed run.
#pragma once
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace moerun::runtime {

struct LayerRowsBalance {
  int64_t busiest_rows = 0;  // sum over steps of the busiest expert rank's rows
  double mean_rows = 0;  // sum over steps of the mean over expert ranks
  double imbalance() const { return mean_rows > 0 ? static_cast<double>(busiest_rows) / mean_rows : 1.0; }
};

struct BalanceReport {
  bool on = false;  // a distributed run
  int64_t steps = 0;
  int64_t expert_ranks = 0;
  std::vector<LayerRowsBalance> layers;  // [MoE layer]
  int64_t replicas = 0;  // copies beyond the first, in the placement at the end
  int64_t routed_rows = 0;  // rows the routers dispatched
  int64_t replica_rows = 0;  // of those, rows sent to a holder other than an expert's first
  int64_t split_experts = 0;  // times a router sent one expert's rows of a micro-batch to several ranks
  int64_t rebalances = 0;  // placements changed by --rebalance-every
  int64_t moves = 0;  // experts loaded onto a rank by those changes
  int64_t heals = 0;  // expert copies that failed verification and were left to a replica

  double imbalance() const;  // sum of every layer's busiest over the sum of their means
  nlohmann::json to_json() const;
  std::string summary() const;  // one line
};

// From every step's rows per layer (`busiest`, `sum`: [step * layers + layer], the maximum and the
// sum over expert ranks).
std::vector<LayerRowsBalance> layer_balance(const std::vector<double>& busiest, const std::vector<double>& sum, int64_t layers,
                                            int64_t expert_ranks);

}  // namespace moerun::runtime

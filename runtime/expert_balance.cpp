// Reducing the counted rows per expert rank to the imbalance per layer.
#include "runtime/expert_balance.hpp"

#include "base/error.hpp"

namespace moerun::runtime {

double BalanceReport::imbalance() const {
  double busiest = 0, mean = 0;
  for (const LayerRowsBalance& l : layers) {
    busiest += static_cast<double>(l.busiest_rows);
    mean += l.mean_rows;
  }
  return mean > 0 ? busiest / mean : 1.0;
}

nlohmann::json BalanceReport::to_json() const {
  nlohmann::json j = {{"imbalance", imbalance()},
                      {"steps", steps},
                      {"expert_ranks", expert_ranks},
                      {"replicas", replicas},
                      {"routed_rows", routed_rows},
                      {"replica_rows", replica_rows},
                      {"split_experts", split_experts},
                      {"rebalances", rebalances},
                      {"moves", moves},
                      {"heals", heals}};
  j["layers"] = nlohmann::json::array();
  for (std::size_t l = 0; l < layers.size(); ++l)
    j["layers"].push_back(
        {{"layer", l}, {"busiest_rows", layers[l].busiest_rows}, {"mean_rows", layers[l].mean_rows}, {"imbalance", layers[l].imbalance()}});
  return j;
}

std::string BalanceReport::summary() const {
  double worst = 1.0;
  for (const LayerRowsBalance& l : layers) worst = std::max(worst, l.imbalance());
  return str("expert balance: the busiest of ", expert_ranks, " expert ranks gets ", imbalance(),
             "x the mean rows per layer and step (worst layer ", worst, "x, ", steps, " steps); ", replicas, " replicas took ",
             routed_rows ? 100.0 * static_cast<double>(replica_rows) / static_cast<double>(routed_rows) : 0.0, "% of the rows (",
             split_experts, " experts split over ranks); ", rebalances, " rebalances moved ", moves, " experts; ", heals, " heals");
}

std::vector<LayerRowsBalance> layer_balance(const std::vector<double>& busiest, const std::vector<double>& sum, int64_t layers,
                                            int64_t expert_ranks) {
  std::vector<LayerRowsBalance> out(static_cast<std::size_t>(layers));
  for (std::size_t i = 0; i < busiest.size(); ++i) {
    LayerRowsBalance& l = out[i % static_cast<std::size_t>(layers)];
    l.busiest_rows += static_cast<int64_t>(busiest[i]);
    l.mean_rows += sum[i] / static_cast<double>(expert_ranks);
  }
  return out;
}

}  // namespace moerun::runtime

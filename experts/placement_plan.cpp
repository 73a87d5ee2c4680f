// The EPLB-style planner: groups to nodes, replicas within nodes, copies to ranks.
#include "experts/placement_plan.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

#include "base/error.hpp"
#include "experts/replica_split.hpp"

namespace moerun::experts {
namespace {

// Copies of one expert at most (rebalancing marks failed copies as bits of an int64).
constexpr int64_t kMaxCopies = 32;

// One pool: the ranks that share a set of experts (a node, or every expert rank).
struct Pool {
  std::vector<int> ranks;  // world ranks
  std::vector<int64_t> experts;  // the pool's experts of this layer
};

// Slots of expert rank i (of R) in `layer` when a layer has `physical` copies: an even share, the
// remainder on ranks that rotate with the layer.
int64_t slots_of(int64_t i, int64_t layer, int64_t physical, int64_t R) {
  const int64_t rem = physical % R;
  const int64_t shifted = ((i - layer * rem) % R + R) % R;
  return physical / R + (shifted < rem ? 1 : 0);
}

int64_t most_held(int64_t layers, int64_t physical, int64_t R) {
  int64_t worst = 0;
  for (int64_t i = 0; i < R; ++i) {
    int64_t n = 0;
    for (int64_t l = 0; l < layers; ++l) n += slots_of(i, l, physical, R);
    worst = std::max(worst, n);
  }
  return worst;
}

// Balanced packing (EPLB step 1): items of `weight` onto `packs` packs of `per_pack` items each,
// heaviest first onto the lightest pack with room (ties: lower item, lower pack).
std::vector<int> pack_evenly(const std::vector<double>& weight, int packs, int64_t per_pack) {
  std::vector<int64_t> order(weight.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return weight[a] > weight[b]; });
  std::vector<double> load(static_cast<std::size_t>(packs), 0.0);
  std::vector<int64_t> count(static_cast<std::size_t>(packs), 0);
  std::vector<int> pack_of(weight.size(), -1);
  for (int64_t item : order) {
    int best = -1;
    for (int p = 0; p < packs; ++p)
      if (count[p] < per_pack && (best < 0 || load[p] < load[best])) best = p;
    pack_of[item] = best;
    load[best] += weight[item];
    ++count[best];
  }
  return pack_of;
}

// EPLB steps 2 and 3 for one pool of one layer: replicas into the pool's spare slots, then the
// copies onto its ranks. `slots[r]`: free slots of pool rank r. Holders are appended to `p`.

// Rows per world rank in `layer`, replicated experts split as the routers split them; experts not
// placed yet (another pool's, while planning) count nowhere.
std::vector<int64_t> rank_rows(const Placement& p, const ExpertLoads& loads, int64_t layer, int world_size, int64_t granule = 1) {
  std::vector<int64_t> totals(static_cast<std::size_t>(p.num_experts));
  for (int64_t e = 0; e < p.num_experts; ++e) totals[e] = p.holders_of(layer, e).empty() ? 0 : loads.at(layer, e);
  return split_among_holders(totals, &p.holders[static_cast<std::size_t>(layer * p.num_experts)], world_size, granule).rank_rows;
}

int64_t busiest(const Placement& p, const ExpertLoads& loads, int64_t layer, const comm::Topology& topo) {
  const std::vector<int64_t> rows = rank_rows(p, loads, layer, topo.world_size);
  return *std::max_element(rows.begin(), rows.end());
}

// Local search after the greedy packing, which assumed even splits: move a copy off the pool's
// busiest rank to a light rank with a free slot, or swap it with one of that rank's copies,
// whichever lowers the busiest rank most (then the sum of squares), as the routers will split the
// rows; until nothing helps. Light ranks tried: the 4 lightest.
void refine_pool(const Pool& pool, const std::vector<int64_t>& slots, int64_t layer, const ExpertLoads& loads, Placement& p,
                 int world_size) {
  const std::size_t R = pool.ranks.size();
  auto score = [&]() {
    const std::vector<int64_t> rows = rank_rows(p, loads, layer, world_size);
    int64_t mx = 0;
    double sq = 0;
    for (int r : pool.ranks) {
      mx = std::max(mx, rows[r]);
      sq += static_cast<double>(rows[r]) * static_cast<double>(rows[r]);
    }
    return std::pair{mx, sq};
  };
  auto on = [&](int rank) {  // experts of the pool that `rank` holds
    std::vector<int64_t> out;
    for (int64_t e : pool.experts)
      if (p.holds(rank, layer, e)) out.push_back(e);
    return out;
  };
  auto swap_in = [&](int64_t e, int from, int to) {
    auto& h = p.holders[static_cast<std::size_t>(layer * p.num_experts + e)];
    *std::find(h.begin(), h.end(), from) = to;
  };
  for (std::size_t iter = 0; iter < 4 * R; ++iter) {
    const auto base = score();
    const std::vector<int64_t> rows = rank_rows(p, loads, layer, world_size);
    std::vector<std::size_t> order(R);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rows[pool.ranks[a]] < rows[pool.ranks[b]]; });
    const int busy = pool.ranks[order.back()];
    auto best = base;
    std::function<void()> apply;
    for (int64_t e : on(busy))
      for (std::size_t k = 0; k < std::min<std::size_t>(4, R - 1); ++k) {
        const std::size_t li = order[k];
        const int light = pool.ranks[li];
        if (p.holds(light, layer, e)) continue;
        const std::vector<int64_t> there = on(light);
        if (static_cast<int64_t>(there.size()) < slots[li]) {  // a move
          swap_in(e, busy, light);
          if (const auto s = score(); s < best) {
            best = s;
            apply = [&, e, busy, light] { swap_in(e, busy, light); };
          }
          swap_in(e, light, busy);
        }
        for (int64_t f : there) {  // a swap
          if (p.holds(busy, layer, f)) continue;
          swap_in(e, busy, light);
          swap_in(f, light, busy);
          if (const auto s = score(); s < best) {
            best = s;
            apply = [&, e, f, busy, light] {
              swap_in(e, busy, light);
              swap_in(f, light, busy);
            };
          }
          swap_in(f, busy, light);
          swap_in(e, light, busy);
        }
      }
    if (!apply) return;
    apply();
  }
}

void place_pool(const Pool& pool, const std::vector<int64_t>& slots, int64_t layer, const ExpertLoads& loads, Placement& p,
                int world_size) {
  const std::size_t n = pool.experts.size(), R = pool.ranks.size();
  const int64_t capacity = std::accumulate(slots.begin(), slots.end(), int64_t{0});
  std::vector<int64_t> copies(n, 1);
  auto per_copy = [&](std::size_t i) { return static_cast<double>(loads.at(layer, pool.experts[i])) / static_cast<double>(copies[i]); };
  for (int64_t extra = capacity - static_cast<int64_t>(n); extra > 0; --extra) {
    std::size_t best = n;
    for (std::size_t i = 0; i < n; ++i)
      if (copies[i] < std::min<int64_t>(static_cast<int64_t>(R), kMaxCopies) && loads.at(layer, pool.experts[i]) > 0 &&
          (best == n || per_copy(i) > per_copy(best)))
        best = i;
    if (best == n) break;  // every loaded expert is on every rank of the pool
    ++copies[best];
  }
  struct Copy {
    std::size_t item;
    double weight;
  };
  std::vector<Copy> all;
  for (std::size_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < copies[i]; ++c) all.push_back({i, per_copy(i)});
  std::stable_sort(all.begin(), all.end(), [](const Copy& a, const Copy& b) { return a.weight > b.weight; });
  std::vector<double> load(R, 0.0);
  std::vector<int64_t> free(slots);
  for (const Copy& c : all) {
    std::vector<int>& h = p.holders[static_cast<std::size_t>(layer * p.num_experts + pool.experts[c.item])];
    std::size_t best = R;
    for (std::size_t r = 0; r < R; ++r) {
      if (free[r] == 0 || std::find(h.begin(), h.end(), pool.ranks[r]) != h.end()) continue;
      if (best == R || load[r] < load[best]) best = r;
    }
    if (best == R) {
      // Only ranks that hold this expert have room left: the copy is dropped (its rows stay with
      // the others); an expert's first copy always finds a rank (capacity >= experts).
      if (h.empty()) fail(ErrorKind::Internal, "placement plan: no rank for layer ", layer, " expert ", pool.experts[c.item]);
      continue;
    }
    h.push_back(pool.ranks[best]);
    load[best] += c.weight;
    --free[best];
  }
  refine_pool(pool, slots, layer, loads, p, world_size);
}

}  // namespace

int64_t ExpertLoads::total() const {
  return std::accumulate(rows.begin(), rows.end(), int64_t{0});
}

ExpertLoads loads_from_traces(const std::vector<io::RoutingTrace>& traces, const std::vector<std::string>& names) {
  ExpertLoads out;
  for (std::size_t i = 0; i < traces.size(); ++i) {
    const io::RoutingTrace& t = traces[i];
    if (i == 0) {
      out.num_layers = t.num_layers;
      out.num_experts = t.num_experts;
      out.rows.assign(static_cast<std::size_t>(t.num_layers * t.num_experts), 0);
    } else if (t.num_layers != out.num_layers || t.num_experts != out.num_experts) {
      fail(ErrorKind::BadInput, names[i], ": ", t.num_layers, " layers x ", t.num_experts, " experts, but ", names[0], " has ",
           out.num_layers, " x ", out.num_experts);
    }
    for (int64_t l = 0; l < t.num_layers; ++l)
      for (int32_t e : t.experts[static_cast<std::size_t>(l)])
        if (e >= 0) ++out.rows[static_cast<std::size_t>(l * t.num_experts + e)];
  }
  return out;
}

void PlacementPlanConfig::validate() const {
  if (redundant < 0) fail_config("redundant", "must be >= 0, not ", redundant);
  if (max_experts_per_rank < 0) fail_config("max_experts_per_rank", "must be >= 0, not ", max_experts_per_rank);
  if (groups < 0) fail_config("groups", "must be >= 0, not ", groups);
}

PlacementPlan plan_placement(const ExpertLoads& loads, const comm::Topology& topo, const PlacementPlanConfig& cfg) {
  cfg.validate();
  const int64_t L = loads.num_layers, E = loads.num_experts, R = static_cast<int64_t>(topo.experts.size());
  if (R == 0) fail(ErrorKind::Usage, "placement plan: the layout has no expert ranks");
  // Copies of one expert beyond the expert ranks are useless: at most R * E - E extra slots.
  int64_t redundant = std::min(cfg.redundant, (R - 1) * E);
  if (cfg.max_experts_per_rank > 0) {
    while (redundant > 0 && most_held(L, E + redundant, R) > cfg.max_experts_per_rank) --redundant;
    if (const int64_t need = most_held(L, E + redundant, R); need > cfg.max_experts_per_rank)
      fail(ErrorKind::Usage, "placement plan: ", L, " layers x ", E, " experts over ", R, " expert ranks need ", need,
           " experts on one rank, but its memory holds ", cfg.max_experts_per_rank,
           " (more expert ranks, or the expert cache: --l1-bytes)");
  }
  // Nodes with expert ranks, and each expert rank's index.
  std::map<int, std::vector<int64_t>> node_ranks;  // node -> indices into topo.experts
  for (int64_t i = 0; i < R; ++i) node_ranks[topo.self(topo.experts[static_cast<std::size_t>(i)]).node].push_back(i);
  const auto N = static_cast<int64_t>(node_ranks.size());
  const int64_t groups = cfg.groups > 1 && E % cfg.groups == 0 ? cfg.groups : E;
  const bool group_limited = groups < E;
  PlacementPlan plan;
  plan.redundant = redundant;
  plan.placement = {L, E, std::vector<std::vector<int>>(static_cast<std::size_t>(L * E))};
  int64_t hierarchical_layers = 0;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<int64_t> slots(static_cast<std::size_t>(R));
    for (int64_t i = 0; i < R; ++i) slots[i] = slots_of(i, l, E + redundant, R);
    bool nodes_first = N > 1 && groups % N == 0;
    for (const auto& [node, idx] : node_ranks) {
      int64_t s = 0;
      for (int64_t i : idx) s += slots[i];
      if (s < E / N) nodes_first = false;
    }
    // One pool of every expert rank (EPLB's global policy)...
    Placement global{L, E, std::vector<std::vector<int>>(static_cast<std::size_t>(L * E))};
    Pool all{topo.experts, {}};
    for (int64_t e = 0; e < E; ++e) all.experts.push_back(e);
    place_pool(all, slots, l, loads, global, topo.world_size);
    bool use_nodes = false;
    Placement by_node{L, E, std::vector<std::vector<int>>(static_cast<std::size_t>(L * E))};
    if (nodes_first) {
      // ...and nodes first: whole groups to nodes, the same number each, then each node as a pool.
      const int64_t group_size = E / groups;
      std::vector<double> group_rows(static_cast<std::size_t>(groups), 0.0);
      for (int64_t e = 0; e < E; ++e) group_rows[e / group_size] += static_cast<double>(loads.at(l, e));
      const std::vector<int> node_of = pack_evenly(group_rows, static_cast<int>(N), groups / N);
      int n = 0;
      for (const auto& [node, idx] : node_ranks) {
        Pool pool;
        std::vector<int64_t> s;
        for (int64_t i : idx) {
          pool.ranks.push_back(topo.experts[static_cast<std::size_t>(i)]);
          s.push_back(slots[i]);
        }
        for (int64_t e = 0; e < E; ++e)
          if (node_of[e / group_size] == n) pool.experts.push_back(e);
        place_pool(pool, s, l, loads, by_node, topo.world_size);
        ++n;
      }
      // With group-limited routing, nodes first keeps a token's rows on at most its groups' nodes
      // (EPLB's reason for it): always. Single experts: unless its busiest rank is more than 2%
      // above the global pool's (equal experts per node cannot spread one very hot expert, where
      // replicas on other nodes can).
      use_nodes = group_limited ||
                  static_cast<double>(busiest(by_node, loads, l, topo)) <= 1.02 * static_cast<double>(busiest(global, loads, l, topo));
    }
    const Placement& chosen = use_nodes ? by_node : global;
    hierarchical_layers += use_nodes;
    for (int64_t e = 0; e < E; ++e) plan.placement.holders[static_cast<std::size_t>(l * E + e)] = chosen.holders_of(l, e);
  }
  plan.hierarchical_layers = hierarchical_layers;
  return plan;
}

std::vector<LayerBalance> expected_balance(const Placement& p, const ExpertLoads& loads, const comm::Topology& topo, int64_t granule) {
  std::vector<LayerBalance> out;
  for (int64_t l = 0; l < p.num_layers; ++l) {
    const std::vector<int64_t> rows = rank_rows(p, loads, l, topo.world_size, granule);
    LayerBalance b;
    for (int r : topo.experts) b.rank_rows.push_back(rows[r]);
    b.max_rows = *std::max_element(b.rank_rows.begin(), b.rank_rows.end());
    b.mean_rows =
        static_cast<double>(std::accumulate(b.rank_rows.begin(), b.rank_rows.end(), int64_t{0})) / static_cast<double>(b.rank_rows.size());
    out.push_back(std::move(b));
  }
  return out;
}

double overall_imbalance(const std::vector<LayerBalance>& layers) {
  double mx = 0, mean = 0;
  for (const LayerBalance& b : layers) {
    mx += static_cast<double>(b.max_rows);
    mean += b.mean_rows;
  }
  return mean > 0 ? mx / mean : 1.0;
}

}  // namespace moerun::experts

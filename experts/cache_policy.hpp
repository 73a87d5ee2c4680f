// The expert cache's policies, apart from its machinery (experts/expert_cache: slots, loaders and
// tiers): which experts to load ahead of a layer, how much keeping a resident expert is worth (the
// lowest is evicted), and the hotness ranking the warm-up settles on.
//   lru: the experts the next layer used last time;
//   affinity: the next layer's likely experts from the affinity graph, and the layer after into L2;
//   gate: the router's prediction for the next layer (hint()), lru where it has none;
//   hotness (warm-up): a count of each expert's rows decaying with the rows routed; eviction takes
//   the coldest, and the settle loads the hottest.
// No locks of its own: the cache calls it under its lock.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/affinity_file.hpp"

namespace moerun::experts {

enum class PrefetchPolicy { Off, Lru, Affinity, Gate };
PrefetchPolicy parse_prefetch(const std::string& s);  // Usage error naming --prefetch
const char* prefetch_name(PrefetchPolicy p);

// How L1 warms up. None: by demand and prefetch only, least recently used evicted first. IdOrder:
// every slot is loaded in (layer, expert) order before serving starts (the first token waits for
// it). Hotness: serving starts at once; a decaying count of each expert's rows ranks the experts,
// eviction takes the coldest, and once the first --warmup-requests requests have finished, idle
// loaders bring in the hottest experts not yet in L1 (hottest first) in place of colder ones.
enum class WarmupPolicy { None, IdOrder, Hotness };
WarmupPolicy parse_warmup(const std::string& s);  // Usage error naming --warmup
const char* warmup_name(WarmupPolicy p);

// Why an expert is loaded: a layer needs it now, a guess, the warm-up (displaces only colder
// experts), or into L2 only.
enum class LoadKind { Demand, Prefetch, Fill, WarmL2 };

struct ScoredExpert {
  double score;  // likelihood of use (prefetch), or hotness (settle)
  int64_t key;  // layer * experts + expert
};

// What to load once a layer's needs are known.
struct PrefetchPlan {
  bool skip = false;  // nothing this layer (prefetch off, or lru backing off)
  std::vector<ScoredExpert> l1;  // into L1, in this order
  std::vector<ScoredExpert> l2;  // into L2 only (affinity: the layer after next)
};

class CachePolicy {
 public:
  // `layers` x `experts` keys; `owns(l, e)`: the experts of this rank; `graph` required for affinity.
  CachePolicy(PrefetchPolicy prefetch, WarmupPolicy warmup, int64_t layers, int64_t experts, const io::AffinityGraph* graph,
              std::function<bool(int64_t, int64_t)> owns);

  PrefetchPolicy prefetch() const { return prefetch_; }
  void set_owns(std::function<bool(int64_t, int64_t)> owns) { owns_ = std::move(owns); }
  // Hotness warm-up with a graph (and not affinity prefetch): the graph's frequencies are the
  // hotness known before serving, a half-life's worth of rows. Returns whether it seeded them.
  bool seed_hotness_from_graph();

  // A layer begins with `rows` per expert: its real rows replace the router's hint, and lru
  // remembers which experts it needed.
  void layer_begins(int64_t layer, const std::vector<int64_t>& rows);
  // What to load after `layer` began with `rows`. `judged` and `used`: prefetched experts judged so
  // far and those used (lru backs off where routing does not repeat).
  PrefetchPlan plan_prefetch(int64_t layer, const std::vector<int64_t>& rows, int64_t judged, int64_t used);
  // After a layer routed `rows`: every expert of it decays by the rows routed, each gains its own.
  void layer_routed(int64_t layer, const std::vector<int64_t>& rows);
  // Gate: rows the router predicts for `layer`, summed over micro-batches until the layer begins.
  void hint(int64_t layer, const std::vector<int64_t>& rows);

  // How much keeping `key` is worth while `current_layer` runs (-1: none yet). The lowest goes
  // first; equal ones by least recent use (the cache's).
  double keep_score(int64_t key, int64_t current_layer) const;
  // Whether a load of `kind` scored `score` may displace an expert worth `victim` (a guess only
  // something worth less than it brings, a warm-up fill only a colder expert).
  bool may_displace(LoadKind kind, double score, double victim) const;
  // The `n` hottest owned experts, hottest first (equal ones by key).
  std::vector<ScoredExpert> hottest(int64_t n) const;

 private:
  int64_t key(int64_t l, int64_t e) const { return l * experts_ + e; }
  void plan_from_graph(int64_t next, const std::vector<int64_t>& rows, PrefetchPlan& plan);
  PrefetchPolicy prefetch_;
  WarmupPolicy warmup_;
  int64_t layers_, experts_;
  const io::AffinityGraph* graph_;
  std::function<bool(int64_t, int64_t)> owns_;
  std::unordered_map<int64_t, double> predicted_;  // key -> predicted share of the next layer's tokens
  std::vector<std::vector<int64_t>> last_needed_;  // [layer]: experts it needed the last time (lru)
  std::vector<std::vector<int64_t>> hinted_;  // [layer]: rows per expert the router predicts (gate)
  std::vector<double> hot_;  // key -> decaying count of rows (hotness)
  uint64_t lru_probe_ = 0;  // layers seen while lru prefetch backs off
};

}  // namespace moerun::experts

// The expert cache's policies: prefetch guesses, keep scores, hotness.
#include "experts/cache_policy.hpp"

#include <algorithm>
#include <cmath>

#include "base/error.hpp"
#include "experts/affinity_graph.hpp"

namespace moerun::experts {
namespace {

// Predicted share below which the affinity policy does not prefetch into L1 (a guess that rarely
// comes true costs a load and may evict something useful).
constexpr double kMinPrefetchShare = 0.02;

// Keep score of an expert the gate prefetch predicts for the next layer: above any hotness count,
// since it is needed within a layer.
constexpr double kPredictedKeep = 1e12;

// Decay of the hotness count per routed row: its half-life is 2048 rows (256 tokens at top-8), so
// the ranking follows the requests in flight rather than the first few prompts, yet estimates each
// expert's share from enough tokens to keep the experts a layer picks most. (A decay per step of
// 0.9 left one-sequence decode ranking by its last ~10 tokens, 80 draws: L1 hit no better than a
// random pick of experts, 0.25 where the routing counts allowed 0.5.)
const double kHotDecayPerRow = std::pow(0.5, 1.0 / 2048);

void by_score(std::vector<ScoredExpert>& v) {
  std::stable_sort(v.begin(), v.end(), [](const ScoredExpert& a, const ScoredExpert& b) { return a.score > b.score; });
}

}  // namespace

PrefetchPolicy parse_prefetch(const std::string& s) {
  if (s == "off") return PrefetchPolicy::Off;
  if (s == "lru") return PrefetchPolicy::Lru;
  if (s == "affinity") return PrefetchPolicy::Affinity;
  if (s == "gate") return PrefetchPolicy::Gate;
  fail(ErrorKind::Usage, "--prefetch: \"", s, "\" is not off, lru, affinity or gate");
}

const char* prefetch_name(PrefetchPolicy p) {
  return p == PrefetchPolicy::Off ? "off" : p == PrefetchPolicy::Lru ? "lru" : p == PrefetchPolicy::Affinity ? "affinity" : "gate";
}

WarmupPolicy parse_warmup(const std::string& s) {
  if (s == "none") return WarmupPolicy::None;
  if (s == "id-order") return WarmupPolicy::IdOrder;
  if (s == "hotness") return WarmupPolicy::Hotness;
  fail(ErrorKind::Usage, "--warmup: \"", s, "\" is not none, id-order or hotness");
}

const char* warmup_name(WarmupPolicy p) {
  return p == WarmupPolicy::None ? "none" : p == WarmupPolicy::IdOrder ? "id-order" : "hotness";
}

CachePolicy::CachePolicy(PrefetchPolicy prefetch, WarmupPolicy warmup, int64_t layers, int64_t experts, const io::AffinityGraph* graph,
                         std::function<bool(int64_t, int64_t)> owns)
    : prefetch_(prefetch),
      warmup_(warmup),
      layers_(layers),
      experts_(experts),
      graph_(graph),
      owns_(std::move(owns)),
      last_needed_(static_cast<std::size_t>(layers)),
      hinted_(static_cast<std::size_t>(layers)),
      hot_(static_cast<std::size_t>(layers * experts), 0.0) {
  if (prefetch_ == PrefetchPolicy::Affinity && !graph_) fail(ErrorKind::Internal, "CachePolicy: affinity prefetch without a graph");
}

bool CachePolicy::seed_hotness_from_graph() {
  if (!graph_ || warmup_ != WarmupPolicy::Hotness || prefetch_ == PrefetchPolicy::Affinity) return false;
  const double tokens = 2048.0 / static_cast<double>(std::max<int64_t>(graph_->top_k, 1));
  for (int64_t l = 0; l < layers_; ++l)
    for (int64_t e = 0; e < experts_; ++e) hot_[static_cast<std::size_t>(key(l, e))] = graph_->freq(l, e) * tokens;
  return true;
}

void CachePolicy::layer_begins(int64_t layer, const std::vector<int64_t>& rows) {
  hinted_[static_cast<std::size_t>(layer)].clear();  // the layer is here: its real rows replace the prediction
  std::vector<int64_t>& last = last_needed_[static_cast<std::size_t>(layer)];
  last.clear();
  for (int64_t e = 0; e < static_cast<int64_t>(rows.size()); ++e)
    if (rows[static_cast<std::size_t>(e)] > 0) last.push_back(e);
}

PrefetchPlan CachePolicy::plan_prefetch(int64_t layer, const std::vector<int64_t>& rows, int64_t judged, int64_t used) {
  PrefetchPlan plan;
  predicted_.clear();  // a new layer's needs are the better evidence
  if (prefetch_ == PrefetchPolicy::Off) {
    plan.skip = true;
    return plan;
  }
  const int64_t next = (layer + 1) % layers_;
  const bool hinted = prefetch_ == PrefetchPolicy::Gate && !hinted_[static_cast<std::size_t>(next)].empty();
  // Gate without a hint for the next layer (the next step's first layer) falls back to lru.
  if (prefetch_ == PrefetchPolicy::Lru || (prefetch_ == PrefetchPolicy::Gate && !hinted)) {
    // Where routing does not repeat (uniform routing: 4% of these prefetches were used on the bench
    // shape) they only take the disk and evict experts that would have hit: once 64 have been
    // judged and fewer than a fifth were used, only every eighth layer still prefetches (to notice
    // when routing starts to repeat).
    if (judged >= 64 && 5 * used < judged && ++lru_probe_ % 8 != 0) {
      plan.skip = true;
      return plan;
    }
    for (int64_t e : last_needed_[static_cast<std::size_t>(next)]) plan.l1.push_back({1.0, key(next, e)});
  } else if (hinted) {
    // The router's prediction for the next layer of this step, likeliest first (none for the next
    // step's first layer: its tokens are not known yet).
    const std::vector<int64_t>& h = hinted_[static_cast<std::size_t>(next)];
    int64_t total = 0;
    for (int64_t r : h) total += r;
    for (int64_t e = 0; e < static_cast<int64_t>(h.size()); ++e)
      if (h[static_cast<std::size_t>(e)] > 0 && owns_(next, e))
        plan.l1.push_back({static_cast<double>(h[static_cast<std::size_t>(e)]) / static_cast<double>(total), key(next, e)});
    by_score(plan.l1);
    for (const ScoredExpert& s : plan.l1) predicted_[s.key] = s.score;
  } else {
    plan_from_graph(next, rows, plan);
  }
  return plan;
}

// Affinity: the next layer of the same step from this layer's rows (the first layer of the next
// step from its marginal frequency: a new token's first layer does not follow this token's last);
// then the layer after next from the predicted next layer, into L1 behind the next layer's experts
// when L1 has room (one layer of lookahead is shorter than a load here), and into L2.
void CachePolicy::plan_from_graph(int64_t next, const std::vector<int64_t>& rows, PrefetchPlan& plan) {
  const std::vector<double> p = predict_next_layer(*graph_, next, next == 0 ? std::vector<int64_t>{} : rows);
  for (int64_t e = 0; e < experts_; ++e)
    if (owns_(next, e) && p[static_cast<std::size_t>(e)] >= kMinPrefetchShare)
      plan.l1.push_back({p[static_cast<std::size_t>(e)], key(next, e)});
  by_score(plan.l1);
  for (const ScoredExpert& s : plan.l1) predicted_[s.key] = s.score;
  const int64_t after = (next + 1) % layers_;
  std::vector<int64_t> rows_next(static_cast<std::size_t>(experts_), 0);
  for (const ScoredExpert& s : plan.l1) rows_next[static_cast<std::size_t>(s.key % experts_)] = std::llround(s.score * 1000);
  const std::vector<double> q = predict_next_layer(*graph_, after, after == 0 ? std::vector<int64_t>{} : rows_next);
  for (int64_t e = 0; e < experts_; ++e)
    if (owns_(after, e) && q[static_cast<std::size_t>(e)] >= kMinPrefetchShare)
      plan.l2.push_back({q[static_cast<std::size_t>(e)], key(after, e)});
  by_score(plan.l2);
  for (const ScoredExpert& s : plan.l2)
    if (!predicted_.count(s.key)) predicted_[s.key] = 0.5 * s.score;  // further away: worth less
  for (const ScoredExpert& s : plan.l2) plan.l1.push_back({0.5 * s.score, s.key});
}

void CachePolicy::layer_routed(int64_t layer, const std::vector<int64_t>& rows) {
  int64_t routed = 0;
  for (int64_t r : rows) routed += std::max<int64_t>(r, 0);
  const double decay = std::pow(kHotDecayPerRow, static_cast<double>(routed));
  for (int64_t e = 0; e < experts_ && e < static_cast<int64_t>(rows.size()); ++e) {
    double& h = hot_[static_cast<std::size_t>(key(layer, e))];
    h = h * decay + static_cast<double>(std::max<int64_t>(rows[static_cast<std::size_t>(e)], 0));
  }
}

void CachePolicy::hint(int64_t layer, const std::vector<int64_t>& rows) {
  std::vector<int64_t>& h = hinted_[static_cast<std::size_t>(layer)];
  h.resize(static_cast<std::size_t>(experts_), 0);
  for (std::size_t e = 0; e < h.size() && e < rows.size(); ++e) h[e] += std::max<int64_t>(rows[e], 0);
}

double CachePolicy::keep_score(int64_t k, int64_t current_layer) const {
  // Its predicted share of the next layer (affinity, gate), or the layer's marginal frequency
  // discounted by how many layers away its next use is (affinity), or its hotness (else LRU).
  auto it = predicted_.find(k);
  if (prefetch_ == PrefetchPolicy::Gate && it != predicted_.end()) return kPredictedKeep + it->second;
  if (prefetch_ != PrefetchPolicy::Affinity) return warmup_ == WarmupPolicy::Hotness ? hot_[static_cast<std::size_t>(k)] : 0.0;
  const int64_t l = k / experts_, e = k % experts_;
  if (it != predicted_.end()) return 1.0 + it->second;
  const int64_t ahead = current_layer < 0 ? l : (l - current_layer + layers_) % layers_;
  return graph_->freq(l, e) * std::pow(0.5, static_cast<double>(ahead));
}

bool CachePolicy::may_displace(LoadKind kind, double score, double victim) const {
  if (kind == LoadKind::Prefetch && prefetch_ == PrefetchPolicy::Affinity && victim >= 1.0 + score) return false;
  if (kind == LoadKind::Prefetch && prefetch_ == PrefetchPolicy::Gate && victim >= kPredictedKeep) return false;
  if (kind == LoadKind::Fill && victim >= score) return false;
  return true;
}

std::vector<ScoredExpert> CachePolicy::hottest(int64_t n) const {
  std::vector<ScoredExpert> out;
  for (int64_t k = 0; k < layers_ * experts_; ++k)
    if (hot_[static_cast<std::size_t>(k)] > 0 && owns_(k / experts_, k % experts_)) out.push_back({hot_[static_cast<std::size_t>(k)], k});
  const auto m = static_cast<std::ptrdiff_t>(std::min<int64_t>(n, static_cast<int64_t>(out.size())));
  std::partial_sort(out.begin(), out.begin() + m, out.end(), [](const ScoredExpert& a, const ScoredExpert& b) {
    return a.score > b.score || (a.score == b.score && a.key < b.key);
  });
  out.resize(static_cast<std::size_t>(m));
  return out;
}

}  // namespace moerun::experts

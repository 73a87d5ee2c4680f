// Affinity graph construction and prediction.
#include "experts/affinity_graph.hpp"

#include <algorithm>

#include "base/error.hpp"

namespace moerun::experts {

io::AffinityGraph build_affinity_graph(const std::vector<io::RoutingTrace>& traces, const std::vector<std::string>& names) {
  if (traces.empty()) fail(ErrorKind::Usage, "affinity build: give at least one --trace");
  io::AffinityGraph g;
  g.num_layers = traces[0].num_layers;
  g.num_experts = traces[0].num_experts;
  g.top_k = traces[0].top_k;
  const int64_t L = g.num_layers, E = g.num_experts, K = g.top_k;
  for (std::size_t t = 0; t < traces.size(); ++t)
    if (traces[t].num_layers != L || traces[t].num_experts != E || traces[t].top_k != K)
      fail(ErrorKind::BadInput, names[t], ": trace has ", traces[t].num_layers, " layers, ", traces[t].num_experts, " experts, top-",
           traces[t].top_k, "; ", names[0], " has ", L, ", ", E, ", top-", K);
  const int64_t Ln = std::max<int64_t>(L - 1, 0);
  g.next_counts.assign(static_cast<std::size_t>(Ln * E * E), 0);
  g.coactivation_counts.assign(static_cast<std::size_t>(L * E * E), 0);
  std::vector<int64_t> uses(static_cast<std::size_t>(L * E), 0);
  auto valid = [&](int32_t e) { return e >= 0 && e < E; };
  for (std::size_t t = 0; t < traces.size(); ++t) {
    const io::RoutingTrace& tr = traces[t];
    g.tokens += tr.tokens();
    for (int64_t tok = 0; tok < tr.tokens(); ++tok)
      for (int64_t l = 0; l < L; ++l) {
        const int32_t* cur = tr.experts[static_cast<std::size_t>(l)].data() + tok * K;
        for (int64_t a = 0; a < K; ++a) {
          if (!valid(cur[a])) continue;
          ++uses[static_cast<std::size_t>(l * E + cur[a])];
          for (int64_t b = 0; b < K; ++b)
            if (b != a && valid(cur[b])) ++g.coactivation_counts[static_cast<std::size_t>((l * E + cur[a]) * E + cur[b])];
          if (l + 1 < L) {
            const int32_t* nxt = tr.experts[static_cast<std::size_t>(l + 1)].data() + tok * K;
            for (int64_t b = 0; b < K; ++b)
              if (valid(nxt[b])) ++g.next_counts[static_cast<std::size_t>((l * E + cur[a]) * E + nxt[b])];
          }
        }
      }
  }
  // P(j | i) = count(i -> j) / (tokens through i): each token through i contributes K next-layer
  // experts, so a row sums to K (the expected number of the token's next experts that are j).
  g.next.assign(g.next_counts.size(), 0.0);
  g.coactivation.assign(g.coactivation_counts.size(), 0.0);
  g.frequency.assign(static_cast<std::size_t>(L * E), 0.0);
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < E; ++i) {
      const int64_t u = uses[static_cast<std::size_t>(l * E + i)];
      g.frequency[static_cast<std::size_t>(l * E + i)] = g.tokens ? static_cast<double>(u) / static_cast<double>(g.tokens) : 0.0;
      if (!u) continue;
      for (int64_t j = 0; j < E; ++j) {
        const std::size_t at = static_cast<std::size_t>((l * E + i) * E + j);
        g.coactivation[at] = static_cast<double>(g.coactivation_counts[at]) / static_cast<double>(u);
        if (l + 1 < L) g.next[at] = static_cast<double>(g.next_counts[at]) / static_cast<double>(u);
      }
    }
  return g;
}

std::vector<AffinityEdge> strongest_edges(const io::AffinityGraph& g, int n, int64_t min_count) {
  std::vector<AffinityEdge> all;
  const int64_t E = g.num_experts;
  for (int64_t l = 0; l < g.num_layers; ++l)
    for (int64_t i = 0; i < E; ++i)
      for (int64_t j = 0; j < E; ++j) {
        const std::size_t at = static_cast<std::size_t>((l * E + i) * E + j);
        if (l + 1 < g.num_layers && g.next_counts[at] >= min_count && g.next_counts[at] > 0)
          all.push_back({"next", l, i, j, g.next_counts[at], g.next[at]});
        if (g.coactivation_counts[at] >= min_count && g.coactivation_counts[at] > 0)
          all.push_back({"coactivation", l, i, j, g.coactivation_counts[at], g.coactivation[at]});
      }
  std::stable_sort(all.begin(), all.end(), [](const AffinityEdge& a, const AffinityEdge& b) {
    return a.probability != b.probability ? a.probability > b.probability : a.count > b.count;
  });
  if (static_cast<int>(all.size()) > n) all.resize(static_cast<std::size_t>(n));
  return all;
}

std::vector<double> predict_next_layer(const io::AffinityGraph& g, int64_t next_layer, const std::vector<int64_t>& rows_prev) {
  const int64_t E = g.num_experts;
  std::vector<double> p(static_cast<std::size_t>(E), 0.0);
  int64_t total = 0;
  for (auto r : rows_prev) total += r;
  if (next_layer > 0 && next_layer < g.num_layers && total > 0) {
    for (int64_t i = 0; i < E; ++i) {
      const int64_t r = rows_prev[static_cast<std::size_t>(i)];
      if (!r) continue;
      for (int64_t j = 0; j < E; ++j) p[static_cast<std::size_t>(j)] += static_cast<double>(r) * g.p_next(next_layer - 1, i, j);
    }
    for (double& x : p) x /= static_cast<double>(total);
    return p;
  }
  if (next_layer >= 0 && next_layer < g.num_layers)
    for (int64_t j = 0; j < E; ++j) p[static_cast<std::size_t>(j)] = g.freq(next_layer, j);
  return p;
}

}  // namespace moerun::experts

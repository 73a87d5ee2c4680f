// Water-filling a replicated expert's rows onto its holders, in integers (every router gets the same bits).
#include "experts/replica_split.hpp"

#include <algorithm>
#include <numeric>

#include "base/error.hpp"

namespace moerun::experts {
namespace {

// Rows for each holder that level their loads: the lowest level L with sum(max(0, L - load)) >= total,
// less the excess (one row each from the first holders below L).
std::vector<int64_t> level_parts(const std::vector<int64_t>& load, int64_t total) {
  const int64_t lo0 = *std::min_element(load.begin(), load.end());
  auto filled = [&](int64_t level) {
    int64_t s = 0;
    for (int64_t l : load) s += std::max<int64_t>(0, level - l);
    return s;
  };
  int64_t lo = lo0, hi = lo0 + total;  // filled(hi) >= total
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (filled(mid) >= total)
      hi = mid;
    else
      lo = mid + 1;
  }
  std::vector<int64_t> part(load.size());
  for (std::size_t j = 0; j < load.size(); ++j) part[j] = std::max<int64_t>(0, lo - load[j]);
  int64_t excess = filled(lo) - total;
  for (std::size_t j = 0; j < part.size() && excess > 0; ++j)
    if (part[j] > 0) --part[j], --excess;
  return part;
}

}  // namespace

ReplicaSplit split_among_holders(const std::vector<int64_t>& totals, const std::vector<int>* holders, int world_size, int64_t granule) {
  const auto E = static_cast<int64_t>(totals.size());
  ReplicaSplit s;
  s.rank_rows.assign(static_cast<std::size_t>(world_size), 0);
  s.parts.resize(static_cast<std::size_t>(E));
  std::vector<int64_t> replicated;
  for (int64_t e = 0; e < E; ++e) {
    if (totals[e] == 0) continue;
    if (holders[e].empty()) fail(ErrorKind::Internal, "split_among_holders: expert ", e, " has rows and no holder");
    if (holders[e].size() == 1) {
      s.rank_rows[holders[e][0]] += totals[e];
      s.parts[e].push_back({holders[e][0], 0, totals[e]});
    } else {
      replicated.push_back(e);
    }
  }
  // Most constrained first (fewest holders), then the hottest, then by id.
  std::stable_sort(replicated.begin(), replicated.end(), [&](int64_t a, int64_t b) {
    if (holders[a].size() != holders[b].size()) return holders[a].size() < holders[b].size();
    return totals[a] > totals[b];
  });
  // Rows of each replicated expert per holder: levelled one expert at a time, then re-levelled
  // each given all the others (coordinate descent on the sum of squared loads, which each
  // levelling minimises over its holders), two more passes.
  std::vector<std::vector<int64_t>> share(replicated.size());
  std::vector<int64_t> load;
  for (int pass = 0; pass < 3; ++pass)
    for (std::size_t i = 0; i < replicated.size(); ++i) {
      const int64_t e = replicated[i];
      const std::vector<int>& h = holders[e];
      if (pass > 0)
        for (std::size_t j = 0; j < h.size(); ++j) s.rank_rows[h[j]] -= share[i][j];
      load.resize(h.size());
      for (std::size_t j = 0; j < h.size(); ++j) load[j] = s.rank_rows[h[j]];
      if (granule <= 0 || totals[e] <= granule) {  // whole, to the lightest holder
        share[i].assign(h.size(), 0);
        share[i][static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin())] = totals[e];
      } else {
        share[i] = level_parts(load, totals[e]);
      }
      for (std::size_t j = 0; j < h.size(); ++j) s.rank_rows[h[j]] += share[i][j];
    }
  // Boundaries at the nearest multiple of the granule to each cumulative share, in holder order.
  for (std::size_t i = 0; i < replicated.size(); ++i) {
    const int64_t e = replicated[i], total = totals[e], g = std::max<int64_t>(granule, 1);
    const std::vector<int>& h = holders[e];
    int64_t begin = 0, cum = 0;
    for (std::size_t j = 0; j < h.size(); ++j) {
      s.rank_rows[h[j]] -= share[i][j];
      cum += share[i][j];
      const int64_t end = j + 1 == h.size() ? total : std::min(total, (cum + g / 2) / g * g);
      if (end <= begin) continue;
      s.parts[e].push_back({h[j], begin, end});
      s.rank_rows[h[j]] += end - begin;
      begin = end;
    }
  }
  return s;
}

}  // namespace moerun::experts

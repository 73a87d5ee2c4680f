// Request division among routers.
#include "runtime/request_split.hpp"

#include <algorithm>
#include <map>

namespace moerun::runtime {

std::vector<std::vector<int64_t>> split_requests(const std::vector<io::Request>& requests, const std::vector<int64_t>& pending, int n,
                                                 int64_t prefix_block) {
  auto cost = [&](int64_t i) {
    const io::Request& r = requests[static_cast<std::size_t>(i)];
    return static_cast<int64_t>(r.prompt_tokens.size()) + r.max_new_tokens;
  };
  // Units that go to one router whole: single requests, or with a prefix cache the requests whose
  // prompts share a first block (so that a prefix is computed on one router, not on each), cut into
  // pieces of at most a fair share so that one popular prefix cannot unbalance the routers.
  std::vector<std::vector<int64_t>> units;
  if (prefix_block > 0 && n > 1) {
    int64_t total = 0;
    for (int64_t i : pending) total += cost(i);
    const int64_t fair = (total + n - 1) / n;
    std::map<std::vector<int32_t>, std::size_t> group_of;
    std::vector<std::vector<int64_t>> groups;
    for (int64_t i : pending) {
      const auto& p = requests[static_cast<std::size_t>(i)].prompt_tokens;
      // Only a prompt longer than one block can reuse one (its last token is always computed).
      if (static_cast<int64_t>(p.size()) <= prefix_block) {
        groups.push_back({i});
        continue;
      }
      const auto [it, fresh] = group_of.try_emplace(std::vector<int32_t>(p.begin(), p.begin() + prefix_block), groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(i);
    }
    for (const auto& g : groups) {
      units.emplace_back();
      int64_t c = 0;
      for (int64_t i : g) {
        if (!units.back().empty() && c + cost(i) > fair) {
          units.emplace_back();
          c = 0;
        }
        units.back().push_back(i);
        c += cost(i);
      }
    }
  } else {
    for (int64_t i : pending) units.push_back({i});
  }
  auto unit_cost = [&](const std::vector<int64_t>& u) {
    int64_t c = 0;
    for (int64_t i : u) c += cost(i);
    return c;
  };
  std::stable_sort(units.begin(), units.end(), [&](const auto& a, const auto& b) { return unit_cost(a) > unit_cost(b); });
  std::vector<std::vector<int64_t>> out(static_cast<std::size_t>(n));
  std::vector<int64_t> load(static_cast<std::size_t>(n), 0);
  for (const auto& u : units) {
    const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[r].insert(out[r].end(), u.begin(), u.end());
    load[r] += unit_cost(u);
  }
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

}  // namespace moerun::runtime

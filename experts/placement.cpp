// Placement policies and the placement file.
#include "experts/placement.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"

namespace moerun::experts {

bool Placement::holds(int rank, int64_t layer, int64_t expert) const {
  const std::vector<int>& h = holders_of(layer, expert);
  return std::find(h.begin(), h.end(), rank) != h.end();
}

bool Placement::has_replicas(int64_t layer) const {
  for (int64_t e = 0; e < num_experts; ++e)
    if (holders_of(layer, e).size() > 1) return true;
  return false;
}

int64_t Placement::replicas() const {
  int64_t n = 0;
  for (const auto& h : holders) n += static_cast<int64_t>(h.size()) - 1;
  return n;
}

int64_t Placement::count_on(int rank) const {
  int64_t n = 0;
  for (const auto& h : holders) n += std::count(h.begin(), h.end(), rank);
  return n;
}

std::string Placement::describe() const {
  std::set<int> ranks;
  for (const auto& h : holders) ranks.insert(h.begin(), h.end());
  std::ostringstream os;
  for (int r : ranks) {
    os << "  rank " << r << " holds " << count_on(r) << " experts:";
    for (int64_t l = 0; l < num_layers; ++l) {
      os << " L" << l << "{";
      bool first = true;
      for (int64_t e = 0; e < num_experts; ++e)
        if (holds(r, l, e)) {
          os << (first ? "" : ",") << e << (holders_of(l, e).size() > 1 ? "*" : "");
          first = false;
        }
      os << "}";
    }
    os << "\n";
  }
  if (const int64_t n = replicas(); n > 0) os << "  (* replicated: " << n << " replicas in all)\n";
  return os.str();
}

std::string Placement::to_json() const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (int64_t l = 0; l < num_layers; ++l) {
    nlohmann::ordered_json row = nlohmann::ordered_json::object();
    for (int64_t e = 0; e < num_experts; ++e) {
      const std::vector<int>& h = holders_of(l, e);
      row[std::to_string(e)] = h.size() == 1 ? nlohmann::ordered_json(h.front()) : nlohmann::ordered_json(h);
    }
    j[std::to_string(l)] = row;
  }
  return j.dump(1) + "\n";
}

Placement round_robin_placement(int64_t layers, int64_t experts, const comm::Topology& topo) {
  Placement p{layers, experts, {}};
  p.holders.resize(static_cast<std::size_t>(layers * experts));
  const auto n = topo.experts.size();
  for (std::size_t i = 0; i < p.holders.size(); ++i) p.holders[i] = {topo.experts[i % n]};
  return p;
}

namespace {

int64_t index_in(const std::string& s, int64_t limit) {
  int64_t v = -1;
  try {
    v = std::stoll(s);
  } catch (...) {}
  return v >= 0 && v < limit && std::to_string(v) == s ? v : -1;
}

// An entry's holders: a rank or a non-empty array of distinct ranks, each an expert rank.
std::vector<int> holders_from(const nlohmann::json& v, const std::string& path, const std::string& where, const comm::Topology& topo) {
  std::vector<nlohmann::json> items;
  if (v.is_array())
    items.assign(v.begin(), v.end());
  else
    items.push_back(v);
  if (items.empty()) fail(ErrorKind::BadInput, path, ": ", where, ": an empty list of ranks");
  std::vector<int> out;
  for (const auto& r : items) {
    if (!r.is_number_integer()) fail(ErrorKind::BadInput, path, ": ", where, ": rank is not an integer (or a list of them)");
    const int64_t rank = r.get<int64_t>();
    if (rank < 0 || rank >= topo.world_size || !topo.is_expert(static_cast<int>(rank)))
      fail(ErrorKind::BadInput, path, ": ", where, ": rank ", rank, " is not an expert rank");
    if (std::find(out.begin(), out.end(), rank) != out.end())
      fail(ErrorKind::BadInput, path, ": ", where, ": rank ", rank, " is listed twice");
    out.push_back(static_cast<int>(rank));
  }
  return out;
}

}  // namespace

Placement placement_from_json(const std::string& path, int64_t layers, int64_t experts, const comm::Topology& topo) {
  const nlohmann::json j = io::parse_json(io::read_regular_file(path, ErrorKind::Usage), path);
  if (!j.is_object()) fail(ErrorKind::BadInput, path, ": not a JSON object {\"layer\": {\"expert\": rank or [ranks]}}");
  Placement p{layers, experts, std::vector<std::vector<int>>(static_cast<std::size_t>(layers * experts))};
  for (auto& [ls, row] : j.items()) {
    const int64_t l = index_in(ls, layers);
    if (l < 0) fail(ErrorKind::BadInput, path, ": layer \"", ls, "\" is not in [0, ", layers, ")");
    if (!row.is_object()) fail(ErrorKind::BadInput, path, ": layer ", ls, " is not an object {\"expert\": rank}");
    for (auto& [es, v] : row.items()) {
      const int64_t e = index_in(es, experts);
      if (e < 0) fail(ErrorKind::BadInput, path, ": layer ", ls, ": expert \"", es, "\" is not in [0, ", experts, ")");
      p.holders[static_cast<std::size_t>(l * experts + e)] = holders_from(v, path, str("layer ", ls, " expert ", es), topo);
    }
  }
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t e = 0; e < experts; ++e)
      if (p.holders_of(l, e).empty()) fail(ErrorKind::BadInput, path, ": layer ", l, " expert ", e, " is not placed");
  return p;
}

Placement make_placement(const std::string& policy, int64_t layers, int64_t experts, const comm::Topology& topo) {
  if (policy == "round-robin") return round_robin_placement(layers, experts, topo);
  return placement_from_json(policy, layers, experts, topo);
}

}  // namespace moerun::experts

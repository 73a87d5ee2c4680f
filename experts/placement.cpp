// Placement policies.
#include "experts/placement.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"
#include "io/input_file.hpp"

namespace moerun::experts {

int64_t Placement::count_on(int rank) const {
  int64_t n = 0;
  for (int o : owner) n += o == rank;
  return n;
}

std::string Placement::describe() const {
  std::ostringstream os;
  std::vector<int> ranks(owner);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  for (int r : ranks) {
    os << "  rank " << r << " owns " << count_on(r) << " experts:";
    for (int64_t l = 0; l < num_layers; ++l) {
      os << " L" << l << "{";
      bool first = true;
      for (int64_t e = 0; e < num_experts; ++e)
        if (owner_of(l, e) == r) {
          os << (first ? "" : ",") << e;
          first = false;
        }
      os << "}";
    }
    os << "\n";
  }
  return os.str();
}

Placement round_robin_placement(int64_t layers, int64_t experts, const comm::Topology& topo) {
  Placement p{layers, experts, {}};
  p.owner.resize(static_cast<std::size_t>(layers * experts));
  const auto n = topo.experts.size();
  for (std::size_t i = 0; i < p.owner.size(); ++i) p.owner[i] = topo.experts[i % n];
  return p;
}

Placement placement_from_json(const std::string& path, int64_t layers, int64_t experts, const comm::Topology& topo) {
  nlohmann::json j = nlohmann::json::parse(io::read_regular_file(path, ErrorKind::Usage), nullptr, false);
  if (j.is_discarded() || !j.is_object()) fail(ErrorKind::BadInput, path, ": not a JSON object {\"layer\": {\"expert\": rank}}");
  Placement p{layers, experts, std::vector<int>(static_cast<std::size_t>(layers * experts), -1)};
  for (auto& [ls, row] : j.items()) {
    int64_t l = -1;
    try { l = std::stoll(ls); } catch (...) {}
    if (l < 0 || l >= layers || std::to_string(l) != ls) fail(ErrorKind::BadInput, path, ": layer \"", ls, "\" is not in [0, ", layers, ")");
    if (!row.is_object()) fail(ErrorKind::BadInput, path, ": layer ", ls, " is not an object {\"expert\": rank}");
    for (auto& [es, rank] : row.items()) {
      int64_t e = -1;
      try { e = std::stoll(es); } catch (...) {}
      if (e < 0 || e >= experts || std::to_string(e) != es)
        fail(ErrorKind::BadInput, path, ": layer ", ls, ": expert \"", es, "\" is not in [0, ", experts, ")");
      if (!rank.is_number_integer()) fail(ErrorKind::BadInput, path, ": layer ", ls, " expert ", es, ": rank is not an integer");
      const int r = rank.get<int>();
      if (r < 0 || r >= topo.world_size || !topo.is_expert(r))
        fail(ErrorKind::BadInput, path, ": layer ", ls, " expert ", es, ": rank ", r, " is not an expert rank");
      p.owner[static_cast<std::size_t>(l * experts + e)] = r;
    }
  }
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t e = 0; e < experts; ++e)
      if (p.owner_of(l, e) < 0) fail(ErrorKind::BadInput, path, ": layer ", l, " expert ", e, " is not placed");
  return p;
}

Placement make_placement(const std::string& policy, int64_t layers, int64_t experts, const comm::Topology& topo) {
  if (policy == "round-robin") return round_robin_placement(layers, experts, topo);
  return placement_from_json(policy, layers, experts, topo);
}

}  // namespace moerun::experts

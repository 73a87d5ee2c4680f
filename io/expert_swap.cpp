// Hot-swap control files and the new experts' weights.
#include "io/expert_swap.hpp"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "base/error.hpp"
#include "io/expert_shards.hpp"
#include "io/hdf5.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"

namespace moerun::io {

std::vector<ExpertSwap> read_swap_control(const std::string& path, const model::ModelConfig& c) {
  const std::string text = read_regular_file(path, ErrorKind::Usage);
  const nlohmann::json j = parse_json(text, path);
  if (!j.is_object() || !j.contains("swaps") || !j["swaps"].is_array() || j["swaps"].empty())
    fail(ErrorKind::BadInput, path, ": field \"swaps\" must be a non-empty array of {\"shard\", \"experts\"}");
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  std::vector<ExpertSwap> out;
  for (std::size_t i = 0; i < j["swaps"].size(); ++i) {
    const nlohmann::json& s = j["swaps"][i];
    const std::string where = str(path, ": swaps[", i, "]");
    if (!s.is_object() || !s.contains("shard") || !s["shard"].is_string() || s["shard"].get<std::string>().empty())
      fail(ErrorKind::BadInput, where, ".shard must be a file name");
    ExpertSwap sw;
    const std::filesystem::path shard = s["shard"].get<std::string>();
    sw.shard = (shard.is_absolute() ? shard : base / shard).string();
    if (!s.contains("experts")) fail(ErrorKind::BadInput, where, ".experts is missing (a list of [layer, expert], or \"all\")");
    const nlohmann::json& ex = s["experts"];
    if (ex.is_string() && ex.get<std::string>() == "all") {
      sw.all = true;
    } else if (ex.is_array() && !ex.empty()) {
      for (const auto& p : ex) {
        if (!p.is_array() || p.size() != 2 || !p[0].is_number_integer() || !p[1].is_number_integer())
          fail(ErrorKind::BadInput, where, ".experts: ", printable(p.dump()), " is not [layer, expert]");
        const int64_t l = p[0].get<int64_t>(), e = p[1].get<int64_t>();
        if (l < 0 || l >= c.num_moe_layers() || e < 0 || e >= c.num_experts)
          fail(ErrorKind::BadInput, where, ".experts: [", l, ", ", e, "] is outside the model's ", c.num_moe_layers(), " MoE layers x ",
               c.num_experts, " experts");
        sw.experts.push_back({l, e});
      }
    } else {
      fail(ErrorKind::BadInput, where, ".experts must be a non-empty list of [layer, expert], or \"all\"");
    }
    out.push_back(std::move(sw));
  }
  return out;
}

namespace {

// Appends to `out` the raw weights of the experts of one swap entry that this rank wants and has not
// taken yet, read under the HDF5 lock (the cache's loaders share it); checked by the caller.
void read_swap_entry(const ExpertSwap& sw, const model::ModelConfig& c, const std::function<bool(int64_t, int64_t)>& wanted,
                     std::set<std::pair<int64_t, int64_t>>& seen, std::vector<NewExpertWeights>& out) {
  std::lock_guard<std::mutex> lock(hdf5_mutex());
  H5Handle file = h5_open_file(sw.shard, H5Mode::ReadOnly);
  h5_reading(sw.shard, [&] {
    std::vector<std::pair<int64_t, int64_t>> list = sw.experts;
    if (sw.all)
      for (int64_t l = 0; l < c.num_moe_layers(); ++l)
        for (int64_t e = 0; e < c.num_experts; ++e)
          if (h5_exists(file, expert_group_path(l, e))) list.push_back({l, e});
    if (list.empty()) fail(ErrorKind::BadInput, sw.shard, ": holds no expert of this model (/layers/L/experts/E)");
    for (auto [l, e] : list) {
      if (!wanted(l, e) || !seen.insert({l, e}).second) continue;
      if (!h5_exists(file, expert_group_path(l, e)))
        fail(ErrorKind::BadInput, sw.shard, ": ", expert_group_path(l, e), " is not in this shard");
      NewExpertWeights w;
      w.layer = l;
      w.expert = e;
      w.xxh64 = check_expert_group(file, sw.shard, l, e, c);
      w.shard = sw.shard;
      w.raw = AlignedBuffer(expert_raw_bytes(c));
      read_expert_group(file, l, e, c, w.raw.data());
      out.push_back(std::move(w));
    }
  });
}

}  // namespace

std::vector<NewExpertWeights> read_swap_experts(const std::vector<ExpertSwap>& swaps, const model::ModelConfig& c,
                                                const std::function<bool(int64_t, int64_t)>& wanted) {
  std::vector<NewExpertWeights> out;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const ExpertSwap& sw : swaps) {
    if (!std::filesystem::is_regular_file(sw.shard)) fail(ErrorKind::BadInput, sw.shard, ": no such shard file");
    read_swap_entry(sw, c, wanted, seen, out);
  }
  // The checks (NaN scan, xxh64) outside the lock.
  for (const NewExpertWeights& w : out) verify_expert(w.raw.data(), c, w.xxh64, w.shard, w.layer, w.expert);
  return out;
}

}  // namespace moerun::io

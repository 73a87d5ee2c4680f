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
#include "io/model_file.hpp"

namespace moerun::io {

std::vector<ExpertSwap> read_swap_control(const std::string& path, const ModelConfig& c) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::BadInput, path, ": cannot read the swap control file");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::BadInput, path, ": not JSON (", e.what(), ")");
  }
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
        if (l < 0 || l >= c.num_layers || e < 0 || e >= c.num_experts)
          fail(ErrorKind::BadInput, where, ".experts: [", l, ", ", e, "] is outside the model's ", c.num_layers, " layers x ",
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

std::vector<NewExpertWeights> read_swap_experts(const std::vector<ExpertSwap>& swaps, const ModelConfig& c,
                                                const std::function<bool(int64_t, int64_t)>& wanted) {
  std::vector<NewExpertWeights> out;
  std::set<std::pair<int64_t, int64_t>> seen;
  const std::size_t each = expert_raw_bytes(c) / 3;
  const hid_t mem = c.dtype == DType::F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_UINT16;
  for (const ExpertSwap& sw : swaps) {
    if (!std::filesystem::is_regular_file(sw.shard)) fail(ErrorKind::BadInput, sw.shard, ": no such shard file");
    std::lock_guard<std::mutex> lock(hdf5_mutex());
    H5Handle file = h5_open_file(sw.shard, H5Mode::ReadOnly);
    h5_reading(sw.shard, [&] {
      std::vector<std::pair<int64_t, int64_t>> list = sw.experts;
      if (sw.all)
        for (int64_t l = 0; l < c.num_layers; ++l)
          for (int64_t e = 0; e < c.num_experts; ++e)
            if (h5_exists(file, expert_group_path(l, e))) list.push_back({l, e});
      if (list.empty()) fail(ErrorKind::BadInput, sw.shard, ": holds no expert of this model (/layers/L/experts/E)");
      for (auto [l, e] : list) {
        if (!wanted(l, e) || !seen.insert({l, e}).second) continue;
        const std::string gp = expert_group_path(l, e);
        if (!h5_exists(file, gp)) fail(ErrorKind::BadInput, sw.shard, ": ", gp, " is not in this shard");
        expect_dataset(file, sw.shard, gp + "/w1", {c.intermediate_size, c.hidden_size}, c.dtype);
        expect_dataset(file, sw.shard, gp + "/w3", {c.intermediate_size, c.hidden_size}, c.dtype);
        expect_dataset(file, sw.shard, gp + "/w2", {c.hidden_size, c.intermediate_size}, c.dtype);
        const std::optional<uint64_t> sum = h5_attr_uint64(h5_open_object(file, gp), "xxh64");
        if (!sum) fail(ErrorKind::BadInput, sw.shard, ": ", gp, " has no xxh64 attribute");
        NewExpertWeights w;
        w.layer = l;
        w.expert = e;
        w.xxh64 = *sum;
        w.shard = sw.shard;
        w.raw = AlignedBuffer(3 * each);
        h5_read(file, gp + "/w1", mem, w.raw.data());
        h5_read(file, gp + "/w3", mem, w.raw.as<unsigned char>() + each);
        h5_read(file, gp + "/w2", mem, w.raw.as<unsigned char>() + 2 * each);
        verify_expert(w.raw.data(), c, w.xxh64, sw.shard, l, e);
        out.push_back(std::move(w));
      }
    });
  }
  return out;
}

}  // namespace moerun::io

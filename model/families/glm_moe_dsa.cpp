// GLM-5 / GLM-5.x (transformers' modeling_glm_moe_dsa, GlmMoeDsaForCausalLM): DeepSeek-V3.2's MLA
// with DeepSeek Sparse Attention and V3's router, with two differences: the indexer ropes
// interleaved pairs (convert de-interleaves its rows as the MLA's), and a layer may share the last
// full layer's choice of positions instead of running its own indexer (indexer_types "shared",
// or the index_topk_freq / index_skip_topk_offset schedule). Its MTP layers are skipped.
#include <algorithm>

#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

// indexer_types as saved, else transformers' schedule: layer i is full when
// max(i - offset + 1, 0) % freq == 0 (freq 1: every layer), or index_topk_pattern ("FSSF...").
void read_indexer_types(const HfConfig& h, ModelConfig& c) {
  std::vector<IndexerKind> kinds;
  std::string field = "indexer_types";  // the field the kinds came from, for the count's error
  for (const char* k : {"indexer_types", "index_topk_pattern"})
    if (h.has(k) && !h.j[k].is_null() && !(k == std::string("indexer_types") ? h.j[k].is_array() : h.j[k].is_string()))
      fail(ErrorKind::BadInput, h.where, ": field ", k, " is ", h.j[k].dump().substr(0, 60),
           k == std::string("indexer_types") ? ", not a list" : ", not a string");
  if (h.has("indexer_types") && h.j["indexer_types"].is_array()) {
    for (const auto& v : h.j["indexer_types"]) {
      if (!v.is_string() || (v != "full" && v != "shared"))
        fail(ErrorKind::BadInput, h.where, ": field indexer_types holds ", v.dump(), ", expected \"full\" or \"shared\"");
      kinds.push_back(v == "shared" ? IndexerKind::Shared : IndexerKind::Full);
    }
  } else if (h.has("index_topk_pattern") && h.j["index_topk_pattern"].is_string()) {
    field = "index_topk_pattern";
    for (char ch : h.j["index_topk_pattern"].get<std::string>()) {
      if (ch != 'F' && ch != 'S')
        fail(ErrorKind::BadInput, h.where, ": field index_topk_pattern holds '", std::string(1, ch), "', expected F or S");
      kinds.push_back(ch == 'S' ? IndexerKind::Shared : IndexerKind::Full);
    }
  } else {
    const int64_t freq = h.integer_or("index_topk_freq", 1), offset = h.integer_or("index_skip_topk_offset", 2);
    if (freq < 1)
      fail(ErrorKind::BadInput, h.where, ": field index_topk_freq is ", freq, ", expected >= 1 (1: every layer runs its indexer)");
    if (offset < 0) fail(ErrorKind::BadInput, h.where, ": field index_skip_topk_offset is ", offset, ", expected >= 0");
    for (int64_t i = 0; i < c.num_layers; ++i)
      kinds.push_back(std::max<int64_t>(i - offset + 1, 0) % freq == 0 ? IndexerKind::Full : IndexerKind::Shared);
  }
  if (static_cast<int64_t>(kinds.size()) != c.num_layers)
    fail(ErrorKind::BadInput, h.where, ": field ", field, " has ", kinds.size(), " entries, expected num_hidden_layers = ", c.num_layers);
  if (std::find(kinds.begin(), kinds.end(), IndexerKind::Shared) != kinds.end()) c.dsa.layer_indexer = std::move(kinds);
}

void glm_dsa_from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  read_deepseek(h, c, note, true);
  read_dsa_indexer(h, c);
  read_indexer_types(h, c);
}

void glm_dsa_synth(ModelConfig& m) {
  synth_dsa(m);
  if (m.num_layers > 2) {  // every other layer after the first two shares the choice before it
    m.dsa.layer_indexer.assign(static_cast<std::size_t>(m.num_layers), IndexerKind::Full);
    for (int64_t l = 2; l < m.num_layers; l += 2) m.dsa.layer_indexer[static_cast<std::size_t>(l)] = IndexerKind::Shared;
  }
}

}  // namespace

const ModelFamily kGlmMoeDsa{.name = "glm_moe_dsa",
                             .from_hf = glm_dsa_from_hf,
                             .synth = glm_dsa_synth,
                             .tensor_names = deepseek_tensor_names,
                             .rope_interleaved = [](const HfConfig&) { return true; },
                             .indexer_rope_interleaved = true,
                             .unconverted_layers = [](const HfConfig& h) { return h.integer_or("num_nextn_predict_layers", 0); }};

}  // namespace moerun::model::families

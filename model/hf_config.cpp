// HfConfig's shared readers and the tensor-name defaults.
#include "model/hf_config.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

#include "model/model_family.hpp"

namespace moerun::model {

namespace {
// moe-hdf5 attribute -> the config.json fields it is read from, in the order families read them
// (where the attribute has the config's own name, none is needed).
const std::map<std::string, std::vector<std::string>>& hf_fields_of_attribute() {
  static const std::map<std::string, std::vector<std::string>> m{
      {"num_layers", {"num_hidden_layers"}},
      {"num_heads", {"num_attention_heads"}},
      {"num_kv_heads", {"num_key_value_heads"}},
      {"max_position", {"max_position_embeddings"}},
      {"top_k", {"num_experts_per_tok"}},
      {"num_experts", {"num_local_experts", "n_routed_experts", "num_experts"}},
      {"intermediate_size", {"moe_intermediate_size", "intermediate_size"}},
      {"dense_intermediate_size", {"intermediate_size"}},
      {"linear_k_heads", {"linear_num_key_heads"}},
      {"linear_v_heads", {"linear_num_value_heads"}},
      {"linear_k_dim", {"linear_key_head_dim"}},
      {"linear_v_dim", {"linear_value_head_dim"}},
      {"linear_conv_kernel", {"linear_conv_kernel_dim"}},
  };
  return m;
}
}  // namespace

Error with_hf_field_names(const Error& e, const nlohmann::json& j) {
  std::string msg = e.what();
  static const std::string kAttr = ": attribute ";
  const std::size_t at = msg.find(kAttr);
  if (at == std::string::npos) return e;
  std::size_t end = at + kAttr.size();
  while (end < msg.size() && (std::isalnum(static_cast<unsigned char>(msg[end])) || msg[end] == '_')) ++end;
  const std::string name = msg.substr(at + kAttr.size(), end - at - kAttr.size());
  std::string field = name;
  if (const auto it = hf_fields_of_attribute().find(name); it != hf_fields_of_attribute().end())
    for (const std::string& f : it->second)
      if (j.contains(f)) {
        field = f;
        break;
      }
  if (!j.contains(field)) return e;  // derived, not read from one field: the attribute's name it is
  return Error(e.kind(), msg.substr(0, at) + ": field " + field + msg.substr(end));
}
using nlohmann::json;

NameMap names_for(const std::string& architecture) {
  NameMap n;
  n.expert_w1 = "mlp.experts.{e}.gate_proj.weight";
  n.expert_w3 = "mlp.experts.{e}.up_proj.weight";
  n.expert_w2 = "mlp.experts.{e}.down_proj.weight";
  if (const ModelFamily* f = find_model_family(architecture); f && f->tensor_names) f->tensor_names(n);
  return n;
}

std::string NameMap::dense_name(const DenseDataset& ds, bool tied) const {
  if (ds.layer < 0 && ds.name == "lm_head" && tied) return "model.embed_tokens.weight";
  const auto it = dense.find(ds.name);
  const std::string& name = it != dense.end() ? it->second : ds.checkpoint;
  return ds.layer < 0 ? name : "model.layers." + std::to_string(ds.layer) + "." + name;
}

void set_all_layers_sliding(ModelConfig& c, int64_t window) {
  c.sliding_window = window;
  c.layer_attention.assign(static_cast<std::size_t>(c.num_layers), AttentionKind::Sliding);
}

void read_dense_layers(const HfConfig& h, ModelConfig& c) {
  const int64_t step = h.integer_or("decoder_sparse_step", 1);
  if (step < 1) fail(ErrorKind::BadInput, h.where, ": field decoder_sparse_step is ", step, ", expected >= 1");
  std::vector<MlpKind> kinds(static_cast<std::size_t>(c.num_layers), MlpKind::Moe);
  for (int64_t l = 0; l < c.num_layers; ++l)
    if ((l + 1) % step != 0) kinds[static_cast<std::size_t>(l)] = MlpKind::Dense;
  if (h.has("mlp_only_layers")) {
    const json& list = h.j["mlp_only_layers"];
    if (!list.is_array()) fail(ErrorKind::BadInput, h.where, ": field mlp_only_layers is not a list of layer indices");
    for (const json& v : list) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.num_layers)
        fail(ErrorKind::BadInput, h.where, ": field mlp_only_layers has ", v.dump(), ", expected layer indices in [0, ", c.num_layers, ")");
      kinds[static_cast<std::size_t>(v.get<int64_t>())] = MlpKind::Dense;
    }
  }
  if (std::find(kinds.begin(), kinds.end(), MlpKind::Dense) == kinds.end()) return;
  c.layer_mlp = std::move(kinds);
  c.dense_intermediate_size = h.integer("intermediate_size");
}

bool read_layer_type_list(const HfConfig& h, ModelConfig& c, AttentionKind other, const char* other_name) {
  if (!h.has("layer_types")) return false;
  const json& t = h.j["layer_types"];
  if (!t.is_array() || static_cast<int64_t>(t.size()) != c.num_layers)
    fail(ErrorKind::BadInput, h.where, ": field layer_types must list ", c.num_layers, " layer kinds (num_hidden_layers)");
  c.layer_attention.clear();
  for (std::size_t l = 0; l < t.size(); ++l) {
    const std::string kind = t[l].is_string() ? t[l].get<std::string>() : t[l].dump();
    if (kind != other_name && kind != "full_attention")
      fail(ErrorKind::BadInput, h.where, ": field layer_types[", l, "] is \"", kind, "\", expected ", other_name, " or full_attention");
    c.layer_attention.push_back(kind == other_name ? other : AttentionKind::Full);
  }
  return true;
}

void read_layer_types(const HfConfig& h, ModelConfig& c) {
  c.sliding_window = h.integer_or("sliding_window", 0);
  if (read_layer_type_list(h, c, AttentionKind::Sliding, "sliding_attention")) return;
  // The config class's default: sliding first, then alternating.
  for (int64_t l = 0; l < c.num_layers; ++l) c.layer_attention.push_back(l % 2 == 0 ? AttentionKind::Sliding : AttentionKind::Full);
}

int64_t read_rotary_dim(const HfConfig& h, int64_t head_dim, double default_factor) {
  // transformers 5.x saves the factor inside rope_parameters (MiniMax-M2's rotary_dim becomes one).
  const bool nested = !h.has("partial_rotary_factor") && h.has("rope_parameters") && h.j["rope_parameters"].is_object() &&
                      h.j["rope_parameters"].contains("partial_rotary_factor");
  const HfConfig p = nested ? HfConfig{h.j["rope_parameters"], h.where} : h;
  const char* field = h.has("rotary_dim") ? "rotary_dim" : nested ? "rope_parameters.partial_rotary_factor" : "partial_rotary_factor";
  const double factor = p.number_or("partial_rotary_factor", default_factor);
  const int64_t r = h.has("rotary_dim") ? h.integer("rotary_dim") : static_cast<int64_t>(static_cast<double>(head_dim) * factor);
  if (r < 2 || r > head_dim || r % 2 != 0)
    fail(ErrorKind::BadInput, h.where, ": field ", field, " gives ", r,
         " rotated dims of each head, expected an even number in [2, head_dim = ", head_dim, "]");
  return r == head_dim ? 0 : r;
}

}  // namespace moerun::model

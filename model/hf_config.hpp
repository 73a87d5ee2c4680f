// Reading a Hugging Face config.json (HfConfig: fields with checks that name the file and field)
// and the checkpoint's tensor names (NameMap): what the converter and the family files share.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/error.hpp"
#include "model/model_config.hpp"
#include "model/model_schema.hpp"

namespace moerun::model {

// Where a field of config.json is, for messages.
struct HfConfig {
  const nlohmann::json& j;
  std::string where;
  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  int64_t integer(const char* k) const {
    if (!has(k)) fail(ErrorKind::BadInput, where, ": field ", k, " is missing");
    if (!j[k].is_number_integer()) fail(ErrorKind::BadInput, where, ": field ", k, " is not an integer");
    // JSON's unsigned integers beyond int64 (2^64 - 1) would read back negative.
    if (j[k].is_number_unsigned() && j[k].get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(ErrorKind::BadInput, where, ": field ", k, " is ", j[k].get<uint64_t>(), ", too large");
    return j[k].get<int64_t>();
  }
  int64_t integer_or(const char* k, int64_t dflt) const { return has(k) ? integer(k) : dflt; }
  double number_or(const char* k, double dflt) const {
    if (!has(k)) return dflt;
    if (!j[k].is_number()) fail(ErrorKind::BadInput, where, ": field ", k, " is not a number");
    return j[k].get<double>();
  }
  bool flag_or(const char* k, bool dflt) const {
    if (!has(k)) return dflt;
    if (!j[k].is_boolean()) fail(ErrorKind::BadInput, where, ": field ", k, " is not true or false");
    return j[k].get<bool>();
  }
  // An id field that may be an integer, a list (the first is taken) or null.
  std::optional<int64_t> token_id(const char* k) const {
    const std::vector<int64_t> ids = token_ids(k);
    if (ids.empty()) return std::nullopt;
    return ids.front();
  }
  // Every id of such a field, in order (generation_config.json's eos_token_id lists the end tokens).
  std::vector<int64_t> token_ids(const char* k) const {
    if (!has(k)) return {};
    std::vector<int64_t> out;
    for (const nlohmann::json& v : j[k].is_array() ? j[k] : nlohmann::json::array({j[k]})) {
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
        fail(ErrorKind::BadInput, where, ": field ", k, " is not a token id");
      out.push_back(v.get<int64_t>());
    }
    return out;
  }
};

// A check of the model's attributes (ModelConfig::validate) that failed on a config made from
// config.json `j`, its message naming the field the user wrote where the attribute came from one
// ("attribute linear_k_dim" -> "field linear_key_head_dim"); other messages unchanged.
Error with_hf_field_names(const Error& e, const nlohmann::json& j);

// The tensor names of one architecture (without the "model." prefix where HF has it).
struct NameMap {
  std::map<std::string, std::string> dense;  // by row name: datasets whose tensor the family names otherwise than the schema's row
  std::string expert_w1, expert_w3, expert_w2;  // with {e}
  // The tensor of a dense dataset, whole: the family's name or the row's, under model.layers.L. for a
  // layer's; a tied LM head is the embedding.
  std::string dense_name(const DenseDataset& ds, bool tied) const;
};

// NameMap of a family: the defaults (Qwen's names), then the family's own (ModelFamily::tensor_names).
NameMap names_for(const std::string& architecture);

// Every layer a sliding window of `window` tokens.
void set_all_layers_sliding(ModelConfig& c, int64_t window);
// Qwen's dense layers: those in mlp_only_layers, and those that decoder_sparse_step skips (a layer is
// MoE when (l + 1) % step == 0), each an MLP of intermediate_size (Qwen2MoeDecoderLayer).
void read_dense_layers(const HfConfig& h, ModelConfig& c);
// config.json's layer_types, each "full_attention" or `other_name` (read as `other`), into
// c.layer_attention; false when the field is absent. BadInput naming the entry otherwise.
bool read_layer_type_list(const HfConfig& h, ModelConfig& c, AttentionKind other, const char* other_name);
// gpt-oss's layer_types: "sliding_attention" or "full_attention" per layer.
void read_layer_types(const HfConfig& h, ModelConfig& c);
// The rotated dims of each head (ModelConfig::rotary_dim, 0 for all of head_dim): config.json's
// rotary_dim (MiniMax's), else int(head_dim x partial_rotary_factor) as transformers' RoPE init (top
// level, or inside rope_parameters as transformers 5.x saves it),
// the factor `default_factor` when absent. BadInput naming the field unless even in [2, head_dim].
int64_t read_rotary_dim(const HfConfig& h, int64_t head_dim, double default_factor);

}  // namespace moerun::model

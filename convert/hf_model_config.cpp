// The Hugging Face config mapping: config.json (and generation_config.json) to moe-hdf5's config
// through the family table, RoPE scaling, and the families' RoPE layout and unconverted layers.
#include "convert/hf_model_config.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "convert/hf_checkpoint.hpp"
#include "convert/hf_convert.hpp"
#include "io/json_input.hpp"
#include "model/hf_config.hpp"
#include "model/model_family.hpp"

namespace moerun::convert {
using nlohmann::json;

namespace {

// RoPE scaling: `rope_scaling` (transformers 4.x) or `rope_parameters` (5.x, which also carries
// rope_theta); the type in "rope_type" or the older "type".
void read_rope(const model::HfConfig& h, model::ModelConfig& c) {
  const char* key = h.has("rope_parameters") ? "rope_parameters" : h.has("rope_scaling") ? "rope_scaling" : nullptr;
  if (!key) return;
  const json& r = h.j[key];
  const std::string where = h.where + ": field " + key;
  if (!r.is_object()) fail(ErrorKind::BadInput, where, " is not an object");
  const model::HfConfig p{r, where};
  if (p.has("rope_theta")) c.rope_theta = p.number_or("rope_theta", c.rope_theta);
  const char* type_key = p.has("rope_type") ? "rope_type" : "type";
  if (!p.has(type_key)) {
    if (std::string(key) == "rope_parameters") return;  // the theta alone
    fail(ErrorKind::BadInput, where, " has no rope_type");
  }
  if (!r[type_key].is_string()) fail(ErrorKind::BadInput, where, ".", type_key, " is not a string");
  const std::string type = r[type_key].get<std::string>();
  if (type == "default") return;
  if (type == "dynamic")
    fail(ErrorKind::BadInput, where, ".rope_type is dynamic: not supported (its frequencies change with the batch's length)");
  c.rope.type = model::parse_rope_type(type, where + ".rope_type");
  c.rope.factor = p.number_or("factor", 1.0);
  c.rope.original_max_position = p.integer_or("original_max_position_embeddings", c.max_position);
  if (c.rope.type == model::RopeType::Yarn) {
    c.rope.beta_fast = p.number_or("beta_fast", 32.0);
    c.rope.beta_slow = p.number_or("beta_slow", 1.0);
    c.rope.attention_factor = p.number_or("attention_factor", 0.0);
    c.rope.mscale = p.number_or("mscale", 0.0);
    c.rope.mscale_all_dim = p.number_or("mscale_all_dim", 0.0);
    c.rope.truncate = p.flag_or("truncate", true);
    if (!p.has("factor")) c.rope.factor = static_cast<double>(c.max_position) / static_cast<double>(c.rope.original_max_position);
  }
  if (c.rope.type == model::RopeType::Llama3) {
    c.rope.low_freq_factor = p.number_or("low_freq_factor", 1.0);
    c.rope.high_freq_factor = p.number_or("high_freq_factor", 4.0);
  }
}

}  // namespace

// DeepSeek lays each RoPE part out as interleaved pairs (x0, x1), (x2, x3)...; moe-hdf5 in
// rotate_half order (the evens, then the odds). Both rotate the same pairs by the same
// frequencies, and q and k are permuted alike, so every score is unchanged. Rows of `w` [rows, cols]:
// the RoPE rows of each head of q (wq, wq_b) or the shared RoPE key's rows of wkv_a.
bool rope_interleaved(const std::string& config_text, const model::ModelConfig& c) {
  const model::ModelFamily* f = model::find_model_family(c.architecture);
  const json j = json::parse(config_text, nullptr, false);
  return f && f->rope_interleaved && j.is_object() && f->rope_interleaved(model::HfConfig{j, "config.json"});
}
void deinterleave_rope(const model::DenseDataset& ds, const model::ModelConfig& c, std::vector<float>& w) {
  const model::MlaShape& m = c.mla;
  std::vector<int64_t> first_rows;  // where each RoPE part starts
  if (ds.name == "wq" || ds.name == "wq_b")
    for (int64_t h = 0; h < c.num_heads; ++h) first_rows.push_back(h * c.head_dim + m.qk_nope_head_dim);
  else if (ds.name == "wkv_a")
    first_rows.push_back(m.kv_lora_rank);
  // GLM-5's indexer: each index head's first qk_rope_head_dim rows of wq_b, the key's of wk, and of
  // the key's LayerNorm (permuted alike, it normalises the same values).
  const model::ModelFamily* f = model::find_model_family(c.architecture);
  if (f && f->indexer_rope_interleaved) {
    if (ds.name == "indexer/wq_b")
      for (int64_t h = 0; h < c.dsa.index_heads; ++h) first_rows.push_back(h * c.dsa.index_head_dim);
    else if (ds.name == "indexer/wk" || ds.name == "indexer/k_norm" || ds.name == "indexer/k_norm_bias")
      first_rows.push_back(0);
  }
  // Only these hold RoPE rows; the other norms may be one-dimensional.
  if (first_rows.empty()) return;
  if (ds.shape.size() != 2 && ds.shape.size() != 1)
    fail(ErrorKind::Internal, "deinterleave_rope: ", ds.name, " is not a matrix or a vector");
  const int64_t cols = ds.shape.size() == 2 ? ds.shape[1] : 1, rope = m.qk_rope_head_dim;
  std::vector<float> part(static_cast<std::size_t>(rope * cols));
  for (int64_t r0 : first_rows) {
    for (int64_t i = 0; i < rope; ++i) {
      const int64_t from = i < rope / 2 ? 2 * i : 2 * (i - rope / 2) + 1;
      std::copy_n(w.data() + (r0 + from) * cols, cols, part.data() + i * cols);
    }
    std::copy(part.begin(), part.end(), w.begin() + r0 * cols);
  }
}

// A tensor of the layers past num_hidden_layers the family does not convert (DeepSeek-V3's
// multi-token prediction: model.layers.L.* for L from num_hidden_layers on).
bool is_mtp_tensor(const std::string& name, const std::string& config_text, const model::ModelConfig& c) {
  static const std::string prefix = "model.layers.";
  const model::ModelFamily* f = model::find_model_family(c.architecture);
  if (f && std::any_of(f->unconverted_prefixes.begin(), f->unconverted_prefixes.end(),
                       [&](const std::string& p) { return name.starts_with(p); }))
    return true;
  if (!f || !f->unconverted_layers || name.rfind(prefix, 0) != 0) return false;
  const json j = json::parse(config_text, nullptr, false);
  const int64_t mtp = j.is_object() ? f->unconverted_layers(model::HfConfig{j, "config.json"}) : 0;
  const std::size_t dot = name.find('.', prefix.size());
  if (mtp <= 0 || dot == std::string::npos) return false;
  const std::string digits = name.substr(prefix.size(), dot - prefix.size());
  if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return false;
  const int64_t l = std::stoll(digits);
  return l >= c.num_layers && l < c.num_layers + mtp;
}

model::ModelConfig model_config_from_hf(const std::string& text, const std::string& where, DType dtype, std::string* notes,
                                        const std::string& generation_text) {
  json j = io::parse_json(text_model_config(text, where), where);
  json gen = json::parse(generation_text.empty() ? "{}" : generation_text, nullptr, false);
  const json* generation = gen.is_discarded() ? nullptr : &gen;
  if (!j.is_object()) fail(ErrorKind::BadInput, where, ": not a JSON object");
  const model::HfConfig h{j, where};
  if (!h.has("model_type") || !j["model_type"].is_string()) fail(ErrorKind::BadInput, where, ": field model_type is missing");
  const std::string type = j["model_type"].get<std::string>();
  const model::ModelFamily* family = model::find_model_family(type);
  if (!family)
    fail(ErrorKind::BadInput, where, ": model_type \"", type, "\" is not supported; supported: ", model::supported_architectures());
  auto note = [&](const std::string& s) {
    if (notes) *notes += s + "\n";
  };
  model::ModelConfig c;
  c.architecture = family->name;
  c.vocab_size = h.integer("vocab_size");
  c.hidden_size = h.integer("hidden_size");
  c.num_layers = h.integer("num_hidden_layers");
  c.num_heads = h.integer("num_attention_heads");
  c.num_kv_heads = h.integer_or("num_key_value_heads", c.num_heads);
  if (c.num_heads <= 0) fail(ErrorKind::BadInput, where, ": field num_attention_heads must be > 0");
  c.head_dim = h.integer_or("head_dim", c.hidden_size / c.num_heads);
  c.max_position = h.integer("max_position_embeddings");
  c.rope_theta = h.number_or("rope_theta", family->rope_theta);
  c.rms_norm_eps = h.number_or("rms_norm_eps", 1e-6);
  c.dtype = dtype;
  read_rope(h, c);
  if (h.has("hidden_act") && j["hidden_act"] != "silu")
    fail(ErrorKind::BadInput, where, ": field hidden_act is ", j["hidden_act"].dump(), "; the experts are SwiGLU (silu)");
  c.top_k = h.integer("num_experts_per_tok");
  family->from_hf(h, c, note);
  c.bos_token_id = h.token_id("bos_token_id").value_or(0);
  // The end tokens: config.json's eos_token_id, and every one generation_config.json lists (what
  // transformers' generate stops at).
  std::vector<int64_t> ends = h.token_ids("eos_token_id");
  if (generation && generation->is_object())
    for (int64_t t : model::HfConfig{*generation, "generation_config.json"}.token_ids("eos_token_id"))
      if (std::find(ends.begin(), ends.end(), t) == ends.end()) ends.push_back(t);
  if (ends.empty())
    fail(ErrorKind::BadInput, where, ": field eos_token_id is missing, here and in generation_config.json (generation needs an end token)");
  c.eos_token_id = ends.front();
  c.extra_eos_token_ids.assign(ends.begin() + 1, ends.end());
  if (!h.has("eos_token_id")) note("eos_token_id from generation_config.json");
  if (ends.size() > 1)
    note("end tokens " + [&] {
      std::string s;
      for (int64_t t : ends) s += (s.empty() ? "" : ", ") + std::to_string(t);
      return s;
    }() + " (config.json and generation_config.json)");
  if (h.has("bos_token_id") && j["bos_token_id"].is_array()) note("bos_token_id is a list: the first is used");
  try {
    c.validate(where);
  } catch (const Error& e) {
    throw model::with_hf_field_names(e, j);  // the user wrote config.json's names, not moe-hdf5's
  }
  return c;
}

}  // namespace moerun::convert

// The root attributes' table (docs/FORMATS.md: versions 1 to 10).
#include "model/model_attributes.hpp"

#include <cstdlib>
#include <sstream>
#include <type_traits>

#include "base/error.hpp"
#include "model/weight_format.hpp"

namespace moerun::model {
namespace {

using Value = std::optional<AttributeValue>;
using When = bool (*)(const ModelConfig&);
bool always(const ModelConfig&) {
  return true;
}

// Row builders. `field` is a generic lambda giving the config's member (const or not), so one row
// holds both directions of one attribute.
template <typename T>
constexpr AttributeType type_of() {
  return std::is_same_v<T, double> ? AttributeType::Float : AttributeType::Integer;
}

// A number every file has (version 1).
template <typename T, typename Field>
ModelAttribute required(const char* name, Field field) {
  return {name, type_of<T>(), 1,
          [=](ModelConfig& c, const Value& v, const std::string& where) {
            if (!v) fail(ErrorKind::BadInput, where, ": root attribute ", name, " is missing");
            field(c) = std::get<T>(*v);
          },
          [=](const ModelConfig& c) -> Value { return field(c); }};
}

// A number with a default, stored when `when` holds.
template <typename T, typename Field>
ModelAttribute defaulted(const char* name, int64_t since, Field field, T dflt, When when = always) {
  return {name, type_of<T>(), since, [=](ModelConfig& c, const Value& v, const std::string&) { field(c) = v ? std::get<T>(*v) : dflt; },
          [=](const ModelConfig& c) -> Value { return when(c) ? Value(field(c)) : std::nullopt; }};
}

// An int64 0 or 1.
template <typename Field>
ModelAttribute flag(const char* name, int64_t since, Field field, bool dflt, When when = always) {
  return {name, AttributeType::Integer, since,
          [=](ModelConfig& c, const Value& v, const std::string& where) {
            const int64_t x = v ? std::get<int64_t>(*v) : int64_t{dflt};
            if (x != 0 && x != 1) fail(ErrorKind::BadInput, where, ": attribute ", name, " is ", x, ", expected 0 or 1");
            field(c) = x == 1;
          },
          [=](const ModelConfig& c) -> Value { return when(c) ? Value(int64_t{field(c) ? 1 : 0}) : std::nullopt; }};
}

// A string naming one of an enum's values: `names` lists them in the enum's order.
template <typename Field>
ModelAttribute one_of(const char* name, int64_t since, Field field, std::vector<std::string> names, When when = always) {
  return {name, AttributeType::Text, since,
          [=](ModelConfig& c, const Value& v, const std::string& where) {
            const std::string s = v ? std::get<std::string>(*v) : names[0];
            for (std::size_t i = 0; i < names.size(); ++i)
              if (s == names[i]) {
                field(c) = static_cast<std::remove_reference_t<decltype(field(c))>>(i);
                return;
              }
            std::string expected;
            for (std::size_t i = 0; i < names.size(); ++i) expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
            fail(ErrorKind::BadInput, where, ": attribute ", name, " is \"", s, "\", expected ", expected);
          },
          [=](const ModelConfig& c) -> Value { return when(c) ? Value(names[static_cast<std::size_t>(field(c))]) : std::nullopt; }};
}

// A string with its own parser and printer (dtype, formats, per-layer lists).
template <typename Parse, typename Print>
ModelAttribute text(const char* name, int64_t since, Parse parse, Print print, When when = always) {
  return {name, AttributeType::Text, since,
          [=](ModelConfig& c, const Value& v, const std::string& where) {
            parse(c, v ? std::optional<std::string>(std::get<std::string>(*v)) : std::nullopt, where);
          },
          [=](const ModelConfig& c) -> Value { return when(c) ? Value(print(c)) : std::nullopt; }};
}

#define MOERUN_FIELD(member) \
  [](auto& c) -> auto& {     \
    return c.member;         \
  }

bool scaled_rope(const ModelConfig& c) {
  return c.rope.type != RopeType::Default;
}
bool has_dense_layers(const ModelConfig& c) {
  return !c.layer_mlp.empty();
}
bool is_mla(const ModelConfig& c) {
  return c.attention_type == AttentionType::Mla;
}
bool has_linear_layers(const ModelConfig& c) {
  return c.num_linear_layers() > 0;
}
bool clamped(const ModelConfig& c) {
  return c.expert_activation == ExpertActivation::ClampedSwiGlu;
}

// Versions 1 and 2: the shapes every model has, and the Qwen2-MoE/OLMoE flags.
void add_base_rows(std::vector<ModelAttribute>& t) {
  t.push_back(text(
      "architecture", 1,
      [](ModelConfig& c, const std::optional<std::string>& v, const std::string& where) {
        if (!v) fail(ErrorKind::BadInput, where, ": root attribute architecture is missing");
        c.architecture = *v;
      },
      [](const ModelConfig& c) { return c.architecture; }));
  t.push_back(required<int64_t>("vocab_size", MOERUN_FIELD(vocab_size)));
  t.push_back(required<int64_t>("hidden_size", MOERUN_FIELD(hidden_size)));
  t.push_back(required<int64_t>("num_layers", MOERUN_FIELD(num_layers)));
  t.push_back(required<int64_t>("num_heads", MOERUN_FIELD(num_heads)));
  t.push_back(required<int64_t>("num_kv_heads", MOERUN_FIELD(num_kv_heads)));
  t.push_back(required<int64_t>("head_dim", MOERUN_FIELD(head_dim)));
  t.push_back(required<int64_t>("intermediate_size", MOERUN_FIELD(intermediate_size)));
  t.push_back(required<int64_t>("num_experts", MOERUN_FIELD(num_experts)));
  t.push_back(required<int64_t>("top_k", MOERUN_FIELD(top_k)));
  t.push_back(required<double>("rope_theta", MOERUN_FIELD(rope_theta)));
  t.push_back(required<double>("rms_norm_eps", MOERUN_FIELD(rms_norm_eps)));
  t.push_back(required<int64_t>("max_position", MOERUN_FIELD(max_position)));
  t.push_back(text(
      "dtype", 1,
      [](ModelConfig& c, const std::optional<std::string>& v, const std::string& where) {
        if (!v) fail(ErrorKind::BadInput, where, ": root attribute dtype is missing");
        c.dtype = parse_dtype(*v, where);
      },
      [](const ModelConfig& c) { return std::string(dtype_name(c.dtype)); }));
  // Absent: plain experts of the model's dtype (every file before it).
  t.push_back(text(
      "expert_format", 2,
      [](ModelConfig& c, const std::optional<std::string>& v, const std::string& where) {
        c.expert_format = v ? parse_weight_format(*v, c.dtype, where) : WeightFormat{c.dtype, WeightScheme::Plain};
      },
      [](const ModelConfig& c) {
        return WeightFormat{c.dtype, c.expert_format.scheme}.name();
      }));
  t.push_back(required<int64_t>("bos_token_id", MOERUN_FIELD(bos_token_id)));
  t.push_back(required<int64_t>("eos_token_id", MOERUN_FIELD(eos_token_id)));
  t.push_back(text(
      "extra_eos_token_ids", 10,
      [](ModelConfig& c, const std::optional<std::string>& v, const std::string& where) {
        c.extra_eos_token_ids.clear();
        if (!v) return;
        std::stringstream in(*v);
        std::string item;
        while (std::getline(in, item, ',')) {
          char* end = nullptr;
          const long long t = std::strtoll(item.c_str(), &end, 10);
          if (item.empty() || *end != '\0' || t < 0 || t >= c.vocab_size)
            fail(ErrorKind::BadInput, where, ": attribute extra_eos_token_ids holds \"", item, "\", expected token ids in [0, ",
                 c.vocab_size, ")");
          c.extra_eos_token_ids.push_back(t);
        }
      },
      [](const ModelConfig& c) {
        std::string s;
        for (int64_t t : c.extra_eos_token_ids) s += (s.empty() ? "" : ",") + std::to_string(t);
        return s;
      },
      [](const ModelConfig& c) { return !c.extra_eos_token_ids.empty(); }));
  // A file without the variant attributes is a Mixtral model.
  t.push_back(flag("norm_topk_prob", 1, MOERUN_FIELD(norm_topk_prob), true));
  t.push_back(defaulted<int64_t>("shared_expert_intermediate_size", 1, MOERUN_FIELD(shared_expert_intermediate_size), 0));
  t.push_back(flag("attention_bias", 1, MOERUN_FIELD(attention_bias), false));
}

// Version 3's layer variants (Qwen3-MoE, gpt-oss) and version 7's partial RoPE.
void add_variant_rows(std::vector<ModelAttribute>& t) {
  t.push_back({"qk_norm", AttributeType::Integer, 3,
               [](ModelConfig& c, const Value& v, const std::string& where) {
                 const int64_t qk = v ? std::get<int64_t>(*v) : 0;
                 if (qk < 0 || qk > 2)
                   fail(ErrorKind::BadInput, where, ": attribute qk_norm is ", qk, ", expected 0 (none), 1 (projection) or 2 (per head)");
                 c.qk_norm = static_cast<QkNorm>(qk);
               },
               [](const ModelConfig& c) -> Value { return static_cast<int64_t>(c.qk_norm); }});
  t.push_back(flag("attention_out_bias", 3, MOERUN_FIELD(attention_out_bias), false));
  t.push_back(flag("attention_sinks", 3, MOERUN_FIELD(attention_sinks), false));
  t.push_back(defaulted<int64_t>("sliding_window", 3, MOERUN_FIELD(sliding_window), 0));
  t.push_back(defaulted<int64_t>("rotary_dim", 7, MOERUN_FIELD(rotary_dim), 0, [](const ModelConfig& c) { return c.rotary_dim > 0; }));
  t.push_back(text(
      "layer_types", 3,
      [](ModelConfig& c, const std::optional<std::string>& v, const std::string& where) {
        if (v) c.layer_attention = parse_layer_attention(*v, where);
      },
      [](const ModelConfig& c) { return layer_attention_text(c.layer_attention); },
      [](const ModelConfig& c) { return !c.layer_attention.empty(); }));
  t.push_back(text(
      "layer_mlp", 3,
      [](ModelConfig& c, const std::optional<std::string>& v, const std::string& where) {
        if (v) c.layer_mlp = parse_layer_mlp(*v, where);
      },
      [](const ModelConfig& c) { return layer_mlp_text(c.layer_mlp); }, has_dense_layers));
  t.push_back(defaulted<int64_t>("dense_intermediate_size", 3, MOERUN_FIELD(dense_intermediate_size), 0, has_dense_layers));
  t.push_back(text(
      "rope_type", 3,
      [](ModelConfig& c, const std::optional<std::string>& v, const std::string& where) {
        c.rope.type = parse_rope_type(v.value_or("default"), where);
      },
      [](const ModelConfig& c) { return std::string(rope_type_name(c.rope.type)); }));
  t.push_back(defaulted<double>("rope_factor", 3, MOERUN_FIELD(rope.factor), 1.0, scaled_rope));
  t.push_back(defaulted<int64_t>("rope_original_max_position", 3, MOERUN_FIELD(rope.original_max_position), 0, scaled_rope));
  t.push_back(defaulted<double>("rope_beta_fast", 3, MOERUN_FIELD(rope.beta_fast), 32.0, scaled_rope));
  t.push_back(defaulted<double>("rope_beta_slow", 3, MOERUN_FIELD(rope.beta_slow), 1.0, scaled_rope));
  t.push_back(defaulted<double>("rope_attention_factor", 3, MOERUN_FIELD(rope.attention_factor), 0.0, scaled_rope));
  t.push_back(defaulted<double>("rope_mscale", 3, MOERUN_FIELD(rope.mscale), 0.0, scaled_rope));
  t.push_back(defaulted<double>("rope_mscale_all_dim", 3, MOERUN_FIELD(rope.mscale_all_dim), 0.0, scaled_rope));
  t.push_back({"rope_truncate", AttributeType::Integer, 3,
               [](ModelConfig& c, const Value& v, const std::string&) { c.rope.truncate = (v ? std::get<int64_t>(*v) : 1) != 0; },
               [](const ModelConfig& c) -> Value { return scaled_rope(c) ? Value(int64_t{c.rope.truncate ? 1 : 0}) : std::nullopt; }});
  t.push_back(defaulted<double>("rope_low_freq_factor", 3, MOERUN_FIELD(rope.low_freq_factor), 1.0, scaled_rope));
  t.push_back(defaulted<double>("rope_high_freq_factor", 3, MOERUN_FIELD(rope.high_freq_factor), 4.0, scaled_rope));
  t.push_back(flag("router_bias", 3, MOERUN_FIELD(router_bias), false));
  t.push_back(one_of("router_scoring", 3, MOERUN_FIELD(router_scoring), {"softmax_topk", "topk_softmax", "sigmoid"}));
  t.push_back(flag("expert_bias", 3, MOERUN_FIELD(expert_bias), false));
  t.push_back(one_of("expert_activation", 3, MOERUN_FIELD(expert_activation), {"swiglu", "swiglu_clamped"}));
  t.push_back(defaulted<double>("swiglu_alpha", 3, MOERUN_FIELD(swiglu_alpha), 1.702, clamped));
  t.push_back(defaulted<double>("swiglu_limit", 3, MOERUN_FIELD(swiglu_limit), 7.0, clamped));
}

// Version 6: MLA and DeepSeek's routing (absent, each keeps the earlier behaviour).
void add_version6_rows(std::vector<ModelAttribute>& t) {
  t.push_back(one_of("attention_type", 6, MOERUN_FIELD(attention_type), {"mha", "mla"}, uses_version6));
  t.push_back(defaulted<int64_t>("q_lora_rank", 6, MOERUN_FIELD(mla.q_lora_rank), 0, is_mla));
  t.push_back(defaulted<int64_t>("kv_lora_rank", 6, MOERUN_FIELD(mla.kv_lora_rank), 0, is_mla));
  t.push_back(defaulted<int64_t>("qk_nope_head_dim", 6, MOERUN_FIELD(mla.qk_nope_head_dim), 0, is_mla));
  t.push_back(defaulted<int64_t>("qk_rope_head_dim", 6, MOERUN_FIELD(mla.qk_rope_head_dim), 0, is_mla));
  t.push_back(defaulted<int64_t>("v_head_dim", 6, MOERUN_FIELD(mla.v_head_dim), 0, is_mla));
  t.push_back(defaulted<int64_t>("router_groups", 6, MOERUN_FIELD(router_groups), 1, uses_version6));
  t.push_back(
      {"router_topk_groups", AttributeType::Integer, 6,
       [](ModelConfig& c, const Value& v, const std::string&) { c.router_topk_groups = v ? std::get<int64_t>(*v) : c.router_groups; },
       [](const ModelConfig& c) -> Value { return uses_version6(c) ? Value(c.router_topk_groups) : std::nullopt; }});
  t.push_back(one_of("router_group_score", 6, MOERUN_FIELD(router_group_score), {"max", "top2_sum"}, uses_version6));
  t.push_back(flag("router_correction_bias", 6, MOERUN_FIELD(router_correction_bias), false, uses_version6));
  t.push_back(defaulted<double>("routed_scaling_factor", 6, MOERUN_FIELD(routed_scaling_factor), 1.0, uses_version6));
  t.push_back(flag("shared_expert_gated", 6, MOERUN_FIELD(shared_expert_gated), true, uses_version6));
}

// Version 8: Gated DeltaNet layers and Qwen3-Next's gated, (1 + w)-normed attention.
void add_version8_rows(std::vector<ModelAttribute>& t) {
  t.push_back(defaulted<int64_t>("linear_k_heads", 8, MOERUN_FIELD(linear.k_heads), 0, has_linear_layers));
  t.push_back(defaulted<int64_t>("linear_v_heads", 8, MOERUN_FIELD(linear.v_heads), 0, has_linear_layers));
  t.push_back(defaulted<int64_t>("linear_k_dim", 8, MOERUN_FIELD(linear.k_dim), 0, has_linear_layers));
  t.push_back(defaulted<int64_t>("linear_v_dim", 8, MOERUN_FIELD(linear.v_dim), 0, has_linear_layers));
  t.push_back(defaulted<int64_t>("linear_conv_kernel", 8, MOERUN_FIELD(linear.conv_kernel), 4, has_linear_layers));
  t.push_back(flag("attention_output_gate", 8, MOERUN_FIELD(attention_output_gate), false,
                   [](const ModelConfig& c) { return c.attention_output_gate; }));
  t.push_back(defaulted<double>("norm_weight_offset", 8, MOERUN_FIELD(norm_weight_offset), 0.0,
                                [](const ModelConfig& c) { return c.norm_weight_offset != 0; }));
}

// Version 11: DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5).
void add_version11_rows(std::vector<ModelAttribute>& t) {
  const auto dsa = [](const ModelConfig& c) { return c.dsa.index_heads > 0; };
  t.push_back(defaulted<int64_t>("index_n_heads", 11, MOERUN_FIELD(dsa.index_heads), 0, dsa));
  t.push_back(defaulted<int64_t>("index_head_dim", 11, MOERUN_FIELD(dsa.index_head_dim), 0, dsa));
  t.push_back(defaulted<int64_t>("index_topk", 11, MOERUN_FIELD(dsa.index_topk), 0, dsa));
  t.push_back(text(
      "index_layer_types", 11,
      [](ModelConfig& c, const std::optional<std::string>& v, const std::string& where) {
        if (v) c.dsa.layer_indexer = parse_layer_indexer(*v, where);
      },
      [](const ModelConfig& c) { return layer_indexer_text(c.dsa.layer_indexer); },
      [](const ModelConfig& c) { return !c.dsa.layer_indexer.empty(); }));
}

#undef MOERUN_FIELD

std::vector<ModelAttribute> make_table() {
  std::vector<ModelAttribute> t;
  add_base_rows(t);
  add_variant_rows(t);
  add_version6_rows(t);
  add_version8_rows(t);
  add_version11_rows(t);
  return t;
}

}  // namespace

const std::vector<ModelAttribute>& model_attributes() {
  static const std::vector<ModelAttribute> table = make_table();
  return table;
}

}  // namespace moerun::model

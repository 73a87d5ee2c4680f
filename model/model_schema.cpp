// The rows of model.h5's dense part, from the config.
#include "model/model_schema.hpp"

namespace moerun::model {

int64_t DenseDataset::elements() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {
// Appends rows: `add` a vector held in float32, `add_matrix` one held in the stored dtype.
class RowList {
 public:
  explicit RowList(std::vector<DenseDataset>& out) : out_(out) {}
  DenseDataset& add(int64_t layer, const std::string& name, std::vector<int64_t> shape, const std::string& checkpoint) {
    const std::string path = layer < 0 ? "/" + name : "/layers/" + std::to_string(layer) + "/" + name;
    out_.push_back({path, name, layer, std::move(shape)});
    out_.back().checkpoint = checkpoint;
    return out_.back();
  }
  DenseDataset& add_matrix(int64_t layer, const std::string& name, std::vector<int64_t> shape, const std::string& checkpoint,
                           bool quantizable = false) {
    DenseDataset& ds = add(layer, name, std::move(shape), checkpoint);
    ds.matrix = true;
    ds.quantizable = quantizable;
    return ds;
  }

 private:
  std::vector<DenseDataset>& out_;
};

// Gated DeltaNet: q, k, v (through the conv), z, b and a from x; its out_proj is wo.
void add_linear_attention(RowList& r, const ModelConfig& c, int64_t l) {
  const LinearAttentionShape& lin = c.linear;
  const int64_t d = c.hidden_size;
  r.add_matrix(l, "linear/w_qkv", {lin.conv_channels(), d}, "linear_attn.in_proj_qkv.weight", true);
  r.add_matrix(l, "linear/w_z", {lin.value_width(), d}, "linear_attn.in_proj_z.weight", true);
  r.add_matrix(l, "linear/w_b", {lin.v_heads, d}, "linear_attn.in_proj_b.weight");
  r.add_matrix(l, "linear/w_a", {lin.v_heads, d}, "linear_attn.in_proj_a.weight");
  // The decay's parameters and the conv taps stay exact whatever the dtype.
  r.add(l, "linear/conv", {lin.conv_channels(), lin.conv_kernel}, "linear_attn.conv1d.weight").float32 = true;
  r.add(l, "linear/dt_bias", {lin.v_heads}, "linear_attn.dt_bias").float32 = true;
  r.add(l, "linear/A_log", {lin.v_heads}, "linear_attn.A_log").float32 = true;
  r.add(l, "linear/norm", {lin.v_dim}, "linear_attn.norm.weight");
  r.add_matrix(l, "wo", {d, lin.value_width()}, "linear_attn.out_proj.weight", true);
}

// DSA's lightning indexer: its queries from MLA's normed q latent, its key and head weights from x.
void add_dsa_indexer(RowList& r, const ModelConfig& c, int64_t l) {
  const DsaShape& s = c.dsa;
  r.add_matrix(l, "indexer/wq_b", {s.index_heads * s.index_head_dim, c.mla.q_lora_rank}, "self_attn.indexer.wq_b.weight");
  r.add_matrix(l, "indexer/wk", {s.index_head_dim, c.hidden_size}, "self_attn.indexer.wk.weight");
  r.add(l, "indexer/k_norm", {s.index_head_dim}, "self_attn.indexer.k_norm.weight");
  r.add(l, "indexer/k_norm_bias", {s.index_head_dim}, "self_attn.indexer.k_norm.bias");
  r.add_matrix(l, "indexer/weights_proj", {s.index_heads, c.hidden_size}, "self_attn.indexer.weights_proj.weight");
}

void add_mla_attention(RowList& r, const ModelConfig& c, int64_t l) {
  const MlaShape& m = c.mla;
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim;
  if (m.q_lora_rank > 0) {
    r.add_matrix(l, "wq_a", {m.q_lora_rank, d}, "self_attn.q_a_proj.weight");
    r.add(l, "q_a_norm", {m.q_lora_rank}, "self_attn.q_a_layernorm.weight");
    r.add_matrix(l, "wq_b", {q, m.q_lora_rank}, "self_attn.q_b_proj.weight");
  } else {
    r.add_matrix(l, "wq", {q, d}, "self_attn.q_proj.weight");
  }
  r.add_matrix(l, "wkv_a", {m.kv_lora_rank + m.qk_rope_head_dim, d}, "self_attn.kv_a_proj_with_mqa.weight");
  r.add(l, "kv_a_norm", {m.kv_lora_rank}, "self_attn.kv_a_layernorm.weight");
  r.add_matrix(l, "wkv_b", {c.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank}, "self_attn.kv_b_proj.weight");
  r.add_matrix(l, "wo", {d, c.attention_out_dim()}, "self_attn.o_proj.weight");
  if (c.is_dsa() && !c.dsa.shared(l)) add_dsa_indexer(r, c, l);
}

void add_attention(RowList& r, const ModelConfig& c, int64_t l) {
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  r.add_matrix(l, "wq", {q, d}, "self_attn.q_proj.weight", true);
  if (c.attention_output_gate) r.add_matrix(l, "wq_gate", {q, d}, "self_attn.q_proj.weight", true);
  r.add_matrix(l, "wk", {kv, d}, "self_attn.k_proj.weight", true);
  r.add_matrix(l, "wv", {kv, d}, "self_attn.v_proj.weight", true);
  r.add_matrix(l, "wo", {d, c.attention_out_dim()}, "self_attn.o_proj.weight", true);
}

// Biases, q/k norms and sinks of the (non-linear) attention layers, after ffn_norm in the file.
void add_attention_variants(RowList& r, const ModelConfig& c, int64_t l) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  if (c.attention_bias) {
    r.add(l, "bq", {q}, "self_attn.q_proj.bias");
    r.add(l, "bk", {kv}, "self_attn.k_proj.bias");
    r.add(l, "bv", {kv}, "self_attn.v_proj.bias");
  }
  if (c.qk_norm != QkNorm::None) {
    const bool per_head = c.qk_norm == QkNorm::PerHead;
    r.add(l, "q_norm", {per_head ? c.head_dim : q}, "self_attn.q_norm.weight").norm_offset = true;
    r.add(l, "k_norm", {per_head ? c.head_dim : kv}, "self_attn.k_norm.weight").norm_offset = true;
  }
  if (c.attention_out_bias) r.add(l, "bo", {c.hidden_size}, "self_attn.o_proj.bias");
  if (c.attention_sinks) r.add(l, "sinks", {c.num_heads}, "self_attn.sinks");
}

// The MLP of a layer: a dense SwiGLU, or the MoE block's gate, its biases and the shared expert
// (the routed experts live in the shards).
void add_mlp(RowList& r, const ModelConfig& c, int64_t l) {
  const int64_t d = c.hidden_size;
  if (!c.is_moe_layer(l)) {
    const int64_t dff = c.dense_intermediate_size;
    r.add_matrix(l, "mlp/w1", {dff, d}, "mlp.gate_proj.weight", true);
    r.add_matrix(l, "mlp/w3", {dff, d}, "mlp.up_proj.weight", true);
    r.add_matrix(l, "mlp/w2", {d, dff}, "mlp.down_proj.weight", true);
    return;
  }
  r.add(l, "gate", {c.num_experts, d}, "mlp.gate.weight").float32_matrix = true;
  if (c.router_bias) r.add(l, "gate_bias", {c.num_experts}, "mlp.router.bias");
  if (c.router_correction_bias) {
    DenseDataset& bias = r.add(l, "gate_correction_bias", {c.num_experts}, "mlp.gate.e_score_correction_bias");
    bias.float32 = true;  // kept in float32 as the checkpoints keep it: it decides close choices
    bias.parameter = false;
  }
  if (const int64_t sff = c.shared_expert_intermediate_size; sff > 0) {
    r.add_matrix(l, "shared_expert/w1", {sff, d}, "mlp.shared_expert.gate_proj.weight", true);
    r.add_matrix(l, "shared_expert/w3", {sff, d}, "mlp.shared_expert.up_proj.weight", true);
    r.add_matrix(l, "shared_expert/w2", {d, sff}, "mlp.shared_expert.down_proj.weight", true);
    if (c.shared_expert_gated) r.add(l, "shared_expert_gate", {1, d}, "mlp.shared_expert_gate.weight");
  }
}
}  // namespace

std::vector<DenseDataset> dense_datasets(const ModelConfig& c) {
  const int64_t d = c.hidden_size;
  std::vector<DenseDataset> out;
  RowList r(out);
  r.add_matrix(-1, "embed_tokens", {c.vocab_size, d}, "model.embed_tokens.weight");
  r.add(-1, "final_norm", {d}, "model.norm.weight").norm_offset = true;
  r.add_matrix(-1, "lm_head", {c.vocab_size, d}, "lm_head.weight", true);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    r.add(l, "attn_norm", {d}, "input_layernorm.weight").norm_offset = true;
    if (c.is_linear_layer(l))
      add_linear_attention(r, c, l);
    else if (c.attention_type == AttentionType::Mla)
      add_mla_attention(r, c, l);
    else
      add_attention(r, c, l);
    r.add(l, "ffn_norm", {d}, "post_attention_layernorm.weight").norm_offset = true;
    if (!c.is_linear_layer(l)) add_attention_variants(r, c, l);
    add_mlp(r, c, l);
  }
  return out;
}

int64_t dense_params(const ModelConfig& c) {
  int64_t n = 0;
  for (const DenseDataset& ds : dense_datasets(c))
    if (ds.parameter) n += ds.elements();
  return n;
}

int64_t quantizable_elements(const ModelConfig& c) {
  int64_t n = 0;
  for (const DenseDataset& ds : dense_datasets(c))
    if (ds.quantizable) n += ds.elements();
  return n;
}

// ModelConfig's count is the schema's (declared with the config, summed here).
int64_t ModelConfig::dense_params() const {
  return model::dense_params(*this);
}

}  // namespace moerun::model

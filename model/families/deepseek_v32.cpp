// DeepSeek-V3.2 (transformers' modeling_deepseek_v32): DeepSeek-V3 with DeepSeek Sparse Attention.
// Each layer's MLA attends to the index_topk cached positions its lightning indexer scores highest
// per query (ModelConfig::dsa); the indexer's RoPE is half-split (rotate_half) already, only the
// MLA's own RoPE rows are interleaved. Its multi-token prediction layer is skipped, as V3's.
#include "model/families/families.hpp"

namespace moerun::model::families {
namespace {

void v32_from_hf(const HfConfig& h, ModelConfig& c, const NoteSink& note) {
  read_deepseek(h, c, note, true);
  read_dsa_indexer(h, c);
}

void v32_synth(ModelConfig& m) {
  synth_dsa(m);
}

}  // namespace

void synth_dsa(ModelConfig& m) {
  synth_deepseek(true, m);
  m.dsa.index_heads = 4;
  m.dsa.index_head_dim = 2 * m.mla.qk_rope_head_dim;
  m.dsa.index_topk = 8;
}

void read_dsa_indexer(const HfConfig& h, ModelConfig& c) {
  c.dsa.index_heads = h.integer("index_n_heads");
  c.dsa.index_head_dim = h.integer("index_head_dim");
  c.dsa.index_topk = h.integer("index_topk");
  if (c.dsa.index_heads <= 0 || c.dsa.index_topk <= 0)
    fail(ErrorKind::BadInput, h.where, ": fields index_n_heads and index_topk must be > 0 (", c.dsa.index_heads, ", ", c.dsa.index_topk,
         ")");
  if (c.dsa.index_head_dim < c.mla.qk_rope_head_dim)
    fail(ErrorKind::BadInput, h.where, ": field index_head_dim ", c.dsa.index_head_dim, " is below qk_rope_head_dim ",
         c.mla.qk_rope_head_dim, " (the indexer ropes its first qk_rope_head_dim dims)");
  if (c.mla.q_lora_rank <= 0) fail(ErrorKind::BadInput, h.where, ": field q_lora_rank is 0: the indexer's queries come from the q latent");
}

const ModelFamily kDeepseekV32{.name = "deepseek_v32",
                               .from_hf = v32_from_hf,
                               .synth = v32_synth,
                               .tensor_names = deepseek_tensor_names,
                               .rope_interleaved = [](const HfConfig&) { return true; },
                               .unconverted_layers = [](const HfConfig& h) { return h.integer_or("num_nextn_predict_layers", 0); }};

}  // namespace moerun::model::families

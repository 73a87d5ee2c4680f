// The rows of the family table (model/model_family.cpp), one per file in this folder, and the
// helpers families share.
#pragma once
#include "model/hf_config.hpp"
#include "model/model_family.hpp"

namespace moerun::model::families {

extern const ModelFamily kMixtral, kQwen2Moe, kOlmoe, kQwen3Moe, kGptOss, kDeepseekV2, kDeepseekV3, kDeepseekV32, kGlm4Moe, kGlmMoeDsa,
    kMinimaxM2, kQwen3Next, kQwen3_5Moe;

// Qwen2-MoE and Qwen3-MoE (transformers' Qwen2MoeConfig / Qwen3MoeConfig): experts, dense layers
// and the sliding window alike. Returns whether use_sliding_window is set.
bool read_qwen_moe(const HfConfig& h, ModelConfig& c);
// DeepSeek-V2/V3: config.json (v3: sigmoid routing) and synth's shapes (deepseek_v2.cpp).
void read_deepseek(const HfConfig& h, ModelConfig& c, const NoteSink& note, bool v3);
void synth_deepseek(bool v3, ModelConfig& m);
// DSA's indexer fields (index_n_heads, index_head_dim, index_topk), checked against the MLA shape;
// and synth's DSA model: V3's with an indexer of 4 heads of twice the RoPE width, top 8.
void read_dsa_indexer(const HfConfig& h, ModelConfig& c);
void synth_dsa(ModelConfig& m);
// The MoE part of synth_deepseek: groups, scores, scaling, the shared experts, a dense first layer.
void synth_deepseek_moe(bool v3, ModelConfig& m);
void deepseek_tensor_names(NameMap& n);  // shared_experts (plural) in both
// DeepSeek-V3's router (GLM-4.5 has it too): sigmoid scores, the correction bias, n_group groups by
// their best two, topk_group kept, norm_topk_prob (default true).
void read_v3_router(const HfConfig& h, ModelConfig& c);
// first_k_dense_replace dense layers of intermediate_size (DeepSeek, GLM-4.5).
void read_first_dense_layers(const HfConfig& h, ModelConfig& c);
// A note that the `field` multi-token prediction layers past num_hidden_layers are not converted.
void note_unconverted_layers(const HfConfig& h, const ModelConfig& c, const NoteSink& note, const char* field);
// Qwen3-Next's and Qwen3.5-MoE's hybrid layers (qwen3_next.cpp): config.json's attention, DeltaNet
// shape and layer kinds (layer_types, else every full_attention_interval-th layer full); synth's shape
// (the 3:1 pattern, full attention at every fourth layer and the last); and where a DeltaNet or gated
// attention dataset comes from: Qwen3-Next's fused, interleaved tensors (`fused`) or Qwen3.5's.
void read_hybrid(const HfConfig& h, ModelConfig& c, const NoteSink& note);
void synth_hybrid(ModelConfig& m);
bool hybrid_dense_source(const DenseDataset& ds, const ModelConfig& c, DenseSource& out, bool fused);
// synth's partial RoPE (GLM-4.5's and MiniMax-M2's half of each head): half of head_dim, even; 0
// (all of it) when that is not a proper part.
inline int64_t synth_half_rotary_dim(int64_t head_dim) {
  const int64_t half = head_dim / 4 * 2;
  return half >= 2 && half < head_dim ? half : 0;
}

}  // namespace moerun::model::families

// Which block serves each layer.
#include "runtime/attention_block.hpp"

namespace moerun::runtime {

AttentionBlocks make_attention_blocks(const io::DenseWeights& w, Matmul& mm, MlaMode mla_mode) {
  const model::ModelConfig& c = w.config;
  AttentionBlocks out;
  AttentionBlock* attention = nullptr;
  AttentionBlock* linear = nullptr;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    AttentionBlock*& kind = c.is_linear_layer(l) ? linear : attention;
    if (!kind) {
      out.kinds.push_back(c.is_linear_layer(l) ? make_deltanet_block(w, mm)
                          : c.attention_type == model::AttentionType::Mla ? make_mla_block(w, mm, mla_mode)
                                                                          : make_gqa_block(w, mm));
      kind = out.kinds.back().get();
    }
    out.of_layer.push_back(kind);
  }
  return out;
}

}  // namespace moerun::runtime

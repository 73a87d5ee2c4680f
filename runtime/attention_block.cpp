// Which block serves each layer.
#include "runtime/attention_block.hpp"

#include "runtime/dense_ops.hpp"

namespace moerun::runtime {

void AttentionBlock::forward(const StepBatch& b, const MicroBatch& mb, int64_t l, const StepBuffers& s) {
  const model::ModelConfig& c = w_.config;
  const int64_t d = c.hidden_size, n = mb.tok1 - mb.tok0;
  if (n == 0) return;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const io::DenseLayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
  float* h = s.h + mb.tok0 * d;
  float* xn = s.xn + mb.tok0 * d;
  float* out = s.tmp + mb.tok0 * d;
  rms_norm(h, n, d, L.attn_norm.data(), eps, xn);
  mix(b, mb, l, s, out);
  add_inplace(h, out, n * d);
  rms_norm(h, n, d, L.ffn_norm.data(), eps, xn);
}

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

// The mixer blocks' shared part: the layer norms, and which kind serves each layer.
#include "runtime/blocks/mixer_block.hpp"

#include "runtime/dense_ops.hpp"

namespace moerun::runtime {

void pack_for_decode(Matmul& mm, std::initializer_list<WeightMatrix*> matrices) {
  constexpr int64_t kTypicalRows = 32;
  for (WeightMatrix* m : matrices)
    if (m->rows > 0) mm.pack(*m, kTypicalRows);
}

void MixerBlock::bind(int64_t layer, io::LayerTensors& t) {
  Norms& n = norms_.at(static_cast<std::size_t>(layer));
  n.attn = t.take_vector("attn_norm");
  n.ffn = t.take_vector("ffn_norm");
  bind_mixer(layer, t);
}

void MixerBlock::forward(const StepBatch& b, const MicroBatch& mb, int64_t l, const StepBuffers& s) {
  const int64_t d = c_.hidden_size, n = mb.tok1 - mb.tok0;
  if (n == 0) return;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const Norms& norms = norms_[static_cast<std::size_t>(l)];
  float* h = s.h + mb.tok0 * d;
  float* xn = s.xn + mb.tok0 * d;
  float* out = s.tmp + mb.tok0 * d;
  rms_norm(h, n, d, norms.attn.data(), eps, xn);
  mix(b, mb, l, s, out);
  add_inplace(h, out, n * d);
  rms_norm(h, n, d, norms.ffn.data(), eps, xn);
}

MixerBlocks make_mixer_blocks(io::DenseWeights& w, Matmul& mm, MlaMode mla_mode) {
  const model::ModelConfig& c = w.config;
  MixerBlocks out;
  MixerBlock* attention = nullptr;
  MixerBlock* linear = nullptr;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    MixerBlock*& kind = c.is_linear_layer(l) ? linear : attention;
    if (!kind) {
      out.kinds.push_back(c.is_linear_layer(l)                            ? make_deltanet_block(c, mm)
                          : c.attention_type == model::AttentionType::Mla ? make_mla_block(c, mm, mla_mode)
                                                                          : make_gqa_block(c, mm));
      kind = out.kinds.back().get();
    }
    kind->bind(l, w.layers.at(static_cast<std::size_t>(l)));
    out.of_layer.push_back(kind);
  }
  return out;
}

}  // namespace moerun::runtime

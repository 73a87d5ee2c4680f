// The token-mixing block of a decoder layer, one kind per layer (DESIGN §8: per-layer blocks):
// grouped-query attention (full or sliding, with the families' biases, q/k norms, sinks and output
// gate), MLA (with DSA's indexer where the model has one), or Gated DeltaNet. A kind's block owns
// the weights of its layers, taken from the loaded tensors by their schema names (bind), and keeps
// each layer's state in the sequences' KvCache (K/V rows, latent rows, or the recurrent state).
// Each reads the residual stream of a micro-batch, adds its output to it and leaves the MLP
// block's normed input.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/matmul.hpp"
#include "io/layer_tensors.hpp"
#include "io/model_file.hpp"
#include "runtime/blocks/mla_attention.hpp"
#include "runtime/step_batch.hpp"

namespace moerun::runtime {

// The step's activations, each row-major from the step's token 0 (a micro-batch reads its rows
// from tok0): h [T, d] the residual stream; xn [T, d] the normed input; q, k, v, attn, tmp and mix
// the blocks' scratch, sized by ModelForward::step_buffer_bytes.
struct StepBuffers {
  float *h = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *tmp = nullptr, *mix = nullptr;
  int64_t tokens = 0;
};

class MixerBlock {
 public:
  explicit MixerBlock(const model::ModelConfig& c) : c_(c), norms_(static_cast<std::size_t>(c.num_layers)) {}
  virtual ~MixerBlock() = default;
  // Takes layer `layer`'s norms and mixer weights out of `t` and readies them (packed for the GEMMs).
  void bind(int64_t layer, io::LayerTensors& t);
  // h += mix(attn_norm(h)) over the micro-batch's rows, then xn = ffn_norm(h).
  void forward(const StepBatch& b, const MicroBatch& mb, int64_t layer, const StepBuffers& s);

 protected:
  // The kind's own weights of `layer`.
  virtual void bind_mixer(int64_t layer, io::LayerTensors& t) = 0;
  // The kind's token mixing of the micro-batch's n rows of normed input xn (at s.xn + tok0 rows),
  // its output projected back to d into out [n, d].
  virtual void mix(const StepBatch& b, const MicroBatch& mb, int64_t layer, const StepBuffers& s, float* out) = 0;
  const model::ModelConfig& c_;

 private:
  // The input norm (the mixer's) and the post-mixer norm (the MLP's input), both applied here.
  struct Norms {
    std::vector<float> attn, ffn;
  };
  std::vector<Norms> norms_;  // [layer]
};

// The blocks of a model: one per kind it has, and which serves each layer.
struct MixerBlocks {
  std::vector<std::unique_ptr<MixerBlock>> kinds;
  std::vector<MixerBlock*> of_layer;  // [layer]
};
// Every layer's kind, bound to its tensors in `w.layers` (taken from there).
MixerBlocks make_mixer_blocks(io::DenseWeights& w, Matmul& mm, MlaMode mla_mode);

// The kinds (runtime/blocks/gqa_block.cpp, mla_block.cpp, deltanet_block.cpp).
std::unique_ptr<MixerBlock> make_gqa_block(const model::ModelConfig& c, Matmul& mm);
std::unique_ptr<MixerBlock> make_mla_block(const model::ModelConfig& c, Matmul& mm, MlaMode mode);
std::unique_ptr<MixerBlock> make_deltanet_block(const model::ModelConfig& c, Matmul& mm);

// The matrices a block packs as it binds them: for the row counts of decode steps (a batch of
// sequences); the same layout serves the larger prefill steps. Absent (empty) and quantized
// matrices are left as they are.
void pack_for_decode(Matmul& mm, std::initializer_list<WeightMatrix*> matrices);

}  // namespace moerun::runtime

// The token-mixing block of a decoder layer, one kind per layer (DESIGN §8: per-layer blocks):
// grouped-query attention (full or sliding, with the families' biases, q/k norms, sinks and output
// gate), MLA, or Gated DeltaNet. Each reads the residual stream of a micro-batch, adds its output to
// it and leaves the MLP block's normed input; each keeps its layer state in the sequences' KvCache
// (K/V rows, the latent rows, or the recurrent state).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/matmul.hpp"
#include "io/model_file.hpp"
#include "runtime/mla_attention.hpp"
#include "runtime/step_batch.hpp"

namespace moerun::runtime {

// The step's activations, each row-major from the step's token 0 (a micro-batch reads its rows
// from tok0): h [T, d] the residual stream; xn [T, d] the normed input; q, k, v, attn, tmp and mix
// the blocks' scratch, sized by ModelForward::step_buffer_bytes.
struct StepBuffers {
  float *h = nullptr, *xn = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr, *tmp = nullptr, *mix = nullptr;
  int64_t tokens = 0;
};

class AttentionBlock {
 public:
  explicit AttentionBlock(const io::DenseWeights& w) : w_(w) {}
  virtual ~AttentionBlock() = default;
  // h += mix(attn_norm(h)) over the micro-batch's rows, then xn = ffn_norm(h).
  void forward(const StepBatch& b, const MicroBatch& mb, int64_t layer, const StepBuffers& s);

 protected:
  // The kind's token mixing of the micro-batch's n rows of normed input xn (at s.xn + tok0 rows),
  // its output projected back to d into out [n, d].
  virtual void mix(const StepBatch& b, const MicroBatch& mb, int64_t layer, const StepBuffers& s, float* out) = 0;
  const io::DenseWeights& w_;
};

// The blocks of a model: one per kind it has, and which serves each layer.
struct AttentionBlocks {
  std::vector<std::unique_ptr<AttentionBlock>> kinds;
  std::vector<AttentionBlock*> of_layer;  // [layer]
};
AttentionBlocks make_attention_blocks(const io::DenseWeights& w, Matmul& mm, MlaMode mla_mode);

// The kinds (runtime/gqa_block.cpp, mla_block.cpp, deltanet_block.cpp).
std::unique_ptr<AttentionBlock> make_gqa_block(const io::DenseWeights& w, Matmul& mm);
std::unique_ptr<AttentionBlock> make_mla_block(const io::DenseWeights& w, Matmul& mm, MlaMode mode);
std::unique_ptr<AttentionBlock> make_deltanet_block(const io::DenseWeights& w, Matmul& mm);

}  // namespace moerun::runtime

// ModelForward: one forward step of the router rank over a batch of sequence chunks (prefill
// chunks and decode tokens mixed): embed, then each layer as its mixer block (runtime/blocks/
// mixer_block) and its MLP block (runtime/blocks/mlp_block: dense, or MoE through a MoeLayer) run
// it, then final norm and LM head for the chunks that emit a token.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/aligned_buffer.hpp"
#include "base/matmul.hpp"
#include "base/swiglu_ffn.hpp"
#include "io/model_file.hpp"
#include "router/router_config.hpp"
#include "runtime/attention.hpp"
#include "runtime/blocks/mixer_block.hpp"
#include "runtime/dense_ops.hpp"
#include "runtime/blocks/mlp_block.hpp"
#include "runtime/moe_layer.hpp"
#include "runtime/routing_stats.hpp"
#include "runtime/step_batch.hpp"

namespace moerun::runtime {

// --quantize-dense: the LM head and multi-head attention's projections (io::quantizable_dense_matrices;
// whole groups of 32 columns) still plain are quantized to `s`; returns how many were. Before the
// fingerprint, so that a matrix read from the dense cache and one quantized here hash alike.
int quantize_dense_weights(Matmul& mm, io::DenseWeights& w, WeightScheme s);
// The dense cache (io/dense_quant_cache) of the local model in `dir` made now, as the first
// `infer --quantize-dense s` would make it: the matrices it does not hold yet are quantized and the
// file rewritten. Returns how many were quantized (0: it was current); BadInput / Io errors as loading.
int make_dense_cache(const std::string& dir, WeightScheme s);

class ModelForward {
 public:
  // The architecture variants of `weights.config` apply (biases, q/k norms, a shared expert, the
  // top-k renormalisation). The blocks take every layer's tensors out of `weights.layers`; the
  // embedding, final norm and LM head stay there (read from there: `weights` must outlive this).
  // The matrices are packed once into the layout oneDNN prefers (otherwise every GEMM re-copies
  // its weights: a third of decode time, issue 11), after the weights were fingerprinted;
  // quantized matrices keep their form.
  ModelForward(io::DenseWeights& weights, Matmul& mm, MoeLayer& moe, const router::RouterConfig& router, int micro_batches,
               MlaMode mla_mode = MlaMode::Auto);
  // Sizes the step buffers for `tokens` tokens and touches them (see EngineConfig::reserve_step_tokens).
  void reserve(int64_t tokens);
  // Bytes of the step buffers reserve(tokens) touches (the memory budget counts them).
  static int64_t step_buffer_bytes(const model::ModelConfig& c, int64_t tokens);
  // Fills logits [batch.logit_rows(), vocab] in chunk order (per chunk: its scored tokens, then
  // the emitted one), in `micro_batches` (0: the count it was built with).
  void forward(const StepBatch& batch, std::vector<float>& logits, RoutingStats* stats, int micro_batches = 0);
  const DensePhaseTimes& times() const { return times_; }
  // Per token of the last step: the first decoder layer whose output was not finite, num_layers
  // when only its logits were not, -1 when all were (runtime/nonfinite_rows.hpp).
  const std::vector<int32_t>& nonfinite_layers() const { return nonfinite_layer_; }

 private:
  const io::DenseWeights& w_;
  Matmul& mm_;
  MoeLayer& moe_;
  router::RouterConfig router_;
  int micro_batches_;
  void flag_logit_rows(const StepBatch& b, const float* logits);
  MixerBlocks mixers_;
  AlignedBuffer h_, xn_, q_, k_, v_, attn_, tmp_, shared_;
  AlignedBuffer mix_;  // Gated DeltaNet's projections and split q/k/v; the output gate of gated attention
  FfnScratch shared_scratch_;  // the dense MLPs' and the shared expert's
  MlpBlocks mlp_;  // after router_: the MoE kind reads its configuration
  DensePhaseTimes times_;
  std::vector<int32_t> nonfinite_layer_;
  std::vector<int64_t> logit_tokens_;  // flag_logit_rows' scratch: the token of each logits row
};

}  // namespace moerun::runtime

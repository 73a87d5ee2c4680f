// ModelForward: one forward step of the router rank over a batch of sequence chunks (prefill
// chunks and decode tokens mixed): embed, then per layer attention with the KV cache and the MoE
// block through a MoeLayer, then final norm and LM head for the chunks that emit a token.
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
#include "runtime/attention_block.hpp"
#include "runtime/dense_ops.hpp"
#include "runtime/mla_attention.hpp"
#include "runtime/moe_layer.hpp"
#include "runtime/routing_stats.hpp"
#include "runtime/step_batch.hpp"

namespace moerun::runtime {

// Seconds per phase on the router side (bench breakdown).
struct DensePhaseTimes {
  double attention = 0;  // norms, QKV/O projections, RoPE, attention
  double gate = 0;
  double moe = 0;        // inside MoeLayer start/finish (see MoeLayer::times for its split)
  double shared_expert = 0;  // the dense shared expert, where the model has one
  double dense_mlp = 0;      // the MLP of the dense layers, where the model has some
  double head = 0;       // final norm + LM head
};

// Packs every dense matrix once into the layout oneDNN prefers (otherwise every GEMM re-copies its
// weights: a third of decode time, issue 11), and splits MLA's kv_b per head. Call after the
// weights were fingerprinted; quantized matrices keep their form.
void pack_dense_weights(Matmul& mm, io::DenseWeights& w);
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
  // top-k renormalisation).
  ModelForward(const io::DenseWeights& weights, Matmul& mm, MoeLayer& moe, const router::RouterConfig& router,
               int micro_batches, MlaMode mla_mode = MlaMode::Auto);
  // Sizes the step buffers for `tokens` tokens and touches them (see EngineConfig::reserve_step_tokens).
  void reserve(int64_t tokens);
  // Bytes of the step buffers reserve(tokens) touches (the memory budget counts them).
  static int64_t step_buffer_bytes(const model::ModelConfig& c, int64_t tokens);
  // Fills logits [batch.logit_rows(), vocab] in chunk order (per chunk: its scored tokens, then
  // the emitted one).
  void forward(const StepBatch& batch, std::vector<float>& logits, RoutingStats* stats);
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
  // The layer's token-mixing block over one micro-batch, leaving the normed input of the MLP block in xn_.
  void attention(const StepBatch& b, const MicroBatch& mb, int64_t layer);
  void attention_and_gate(const StepBatch& b, const MicroBatch& mb, int64_t layer, RoutingStats* stats, int index);
  // Gate prefetch: the next MoE layer's gate applied to this layer's expert input xn [n, d]; its
  // rows per expert go to moe_.hint (the residual stream changes little in a layer, so this
  // predicts most of the next layer's experts before its attention has run).
  void hint_next_layer(const float* xn, int64_t n, int64_t layer, const std::vector<uint8_t>& prefill);
  // A dense layer: attention, then its MLP over the whole batch (no exchange to overlap).
  void dense_layer(const StepBatch& b, const std::vector<MicroBatch>& mbs, int64_t layer);
  void flag_logit_rows(const StepBatch& b, const float* logits);
  std::vector<int64_t> moe_index_;  // per decoder layer, -1 for a dense one
  AttentionBlocks blocks_;
  AlignedBuffer h_, xn_, q_, k_, v_, attn_, tmp_, shared_;
  AlignedBuffer mix_;  // Gated DeltaNet's projections and split q/k/v; the output gate of gated attention
  FfnScratch shared_scratch_;
  DensePhaseTimes times_;
  std::vector<int32_t> nonfinite_layer_;
  std::vector<int64_t> logit_tokens_;  // flag_logit_rows' scratch: the token of each logits row
};

}  // namespace moerun::runtime

// The MLP block of a decoder layer, one kind per layer (DESIGN §8: per-layer blocks): a dense
// SwiGLU (layer_mlp dense), or the MoE block (the gate, the routed experts through the MoeLayer, a
// shared expert). Each kind runs its layer as it schedules it: the dense kind after every
// micro-batch's mixer, over the whole batch; the MoE kind micro-batch by micro-batch, each one's
// experts working while the next one's mixer runs (the exchange overlaps compute). The forward
// step walks the layers and hands each its kind.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/matmul.hpp"
#include "base/swiglu_ffn.hpp"
#include "io/model_file.hpp"
#include "router/router_config.hpp"
#include "io/layer_tensors.hpp"
#include "runtime/blocks/mixer_block.hpp"
#include "runtime/moe_layer.hpp"
#include "runtime/routing_stats.hpp"
#include "runtime/step_batch.hpp"

namespace moerun::runtime {

// Seconds per phase on the router side (bench breakdown).
struct DensePhaseTimes {
  double attention = 0;  // norms, QKV/O projections, RoPE, attention
  double gate = 0;
  double moe = 0;  // inside MoeLayer start/finish (see MoeLayer::times for its split)
  double shared_expert = 0;  // the dense shared expert, where the model has one
  double dense_mlp = 0;  // the MLP of the dense layers, where the model has some
  double head = 0;  // final norm + LM head
};

// One layer's work: the step, its micro-batches, the step's buffers (h, xn, tmp), the shared
// expert's output [T, d] (the MoE kind, where the model has one), the layer's mixer.
struct LayerStep {
  const StepBatch& batch;
  const std::vector<MicroBatch>& micro_batches;
  const StepBuffers& buffers;
  float* shared = nullptr;
  MixerBlock& mixer;
  RoutingStats* stats = nullptr;
};

class MlpBlock {
 public:
  virtual ~MlpBlock() = default;
  // Takes layer `layer`'s MLP weights out of `t` and readies them (packed for the GEMMs).
  virtual void bind(int64_t layer, io::LayerTensors& t) = 0;
  // Layer `layer`: its mixer over every micro-batch, and h += mlp(ffn_norm(h)).
  virtual void run_layer(const LayerStep& s, int64_t layer, DensePhaseTimes& times) = 0;
};

// The blocks of a model: one per kind it has, and which serves each layer, bound to its tensors in
// `w.layers` (taken from there). `scratch` is the FFN scratch the dense MLP and the shared expert share.
struct MlpBlocks {
  std::vector<std::unique_ptr<MlpBlock>> kinds;
  std::vector<MlpBlock*> of_layer;  // [layer]
};
MlpBlocks make_mlp_blocks(io::DenseWeights& w, Matmul& mm, MoeLayer& moe, const router::RouterConfig& router, FfnScratch& scratch);

}  // namespace moerun::runtime

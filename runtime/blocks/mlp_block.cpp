// The MLP blocks: a dense SwiGLU over the whole batch, and the MoE block's micro-batch ping-pong.
#include "runtime/blocks/mlp_block.hpp"

#include <chrono>

#include "runtime/dense_ops.hpp"

namespace moerun::runtime {
namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A dense layer: the mixer over every micro-batch, then the MLP over the whole batch (no exchange
// to overlap).
class DenseMlpBlock final : public MlpBlock {
 public:
  DenseMlpBlock(const model::ModelConfig& c, Matmul& mm, FfnScratch& scratch)
      : c_(c), mm_(mm), scratch_(scratch), layers_(static_cast<std::size_t>(c.num_layers)) {}
  // w1, w3 [dense_ff, d], w2 [d, dense_ff].
  void bind(int64_t l, io::LayerTensors& t) override {
    FfnWeights& f = layers_.at(static_cast<std::size_t>(l));
    t.take({{"mlp/w1", &f.w1}, {"mlp/w3", &f.w3}, {"mlp/w2", &f.w2}});
    pack_for_decode(mm_, {&f.w1, &f.w3, &f.w2});
  }
  void run_layer(const LayerStep& s, int64_t l, DensePhaseTimes& times) override {
    const int64_t T = s.batch.tokens(), d = c_.hidden_size;
    double t0 = now();
    for (const MicroBatch& mb : s.micro_batches) s.mixer.forward(s.batch, mb, l, s.buffers);
    double t1 = now();
    if (T > 0) {
      swiglu_ffn_forward(mm_, s.buffers.xn, T, layers_[static_cast<std::size_t>(l)], s.buffers.tmp, scratch_);
      add_inplace(s.buffers.h, s.buffers.tmp, T * d);
    }
    times.attention += t1 - t0;
    times.dense_mlp += now() - t1;
  }

 private:
  const model::ModelConfig& c_;
  Matmul& mm_;
  FfnScratch& scratch_;
  std::vector<FfnWeights> layers_;  // [layer]
};

// A MoE layer's dense part: the gate [experts, d] (float32: gate logits are computed in float32),
// its biases [experts] (empty where the config has none), the shared expert (w1, w3 [sff, d], w2 [d,
// sff]) and its gate [d] (one output row, when shared_expert_gated).
struct MoeWeights {
  WeightMatrix gate;
  std::vector<float> gate_bias, gate_correction_bias;
  FfnWeights shared_expert;
  std::vector<float> shared_expert_gate;
};

// A MoE layer. Ping-pong: micro-batch i+1's mixer runs while micro-batch i is with the experts;
// the shared expert runs while the routed experts work on its micro-batch.
class MoeMlpBlock final : public MlpBlock {
 public:
  MoeMlpBlock(const model::ModelConfig& c, Matmul& mm, MoeLayer& moe, const router::RouterConfig& router, FfnScratch& scratch)
      : c_(c), mm_(mm), moe_(moe), router_(router), scratch_(scratch), layers_(static_cast<std::size_t>(c.num_layers)) {
    for (int64_t l = 0; l < c.num_layers; ++l) moe_index_.push_back(c.moe_index(l));
  }
  void bind(int64_t l, io::LayerTensors& t) override {
    MoeWeights& L = layers_.at(static_cast<std::size_t>(l));
    t.take({{"gate", &L.gate},
            {"shared_expert/w1", &L.shared_expert.w1},
            {"shared_expert/w3", &L.shared_expert.w3},
            {"shared_expert/w2", &L.shared_expert.w2}},
           {{"gate_bias", &L.gate_bias}, {"gate_correction_bias", &L.gate_correction_bias}, {"shared_expert_gate", &L.shared_expert_gate}});
    mm_.pack(L.gate, 32);
    if (L.shared_expert.w1.rows > 0) pack_ffn(mm_, L.shared_expert);
  }
  void run_layer(const LayerStep& s, int64_t l, DensePhaseTimes& times) override {
    const model::ModelConfig& c = c_;
    const int64_t d = c.hidden_size;
    const int n_mb = static_cast<int>(s.micro_batches.size());
    for (int i = 0; i < n_mb; ++i) mixer_and_gate(s, s.micro_batches[static_cast<std::size_t>(i)], l, i, times);
    double t0 = now();
    for (int i = 0; i < n_mb; ++i) {
      const MicroBatch& mb = s.micro_batches[static_cast<std::size_t>(i)];
      float* h = s.buffers.h + mb.tok0 * d;
      const int64_t rows = mb.tok1 - mb.tok0;
      moe_.finish(i, s.buffers.tmp + mb.tok0 * d);
      add_inplace(h, s.buffers.tmp + mb.tok0 * d, rows * d);
      if (s.shared && c.shared_expert_gated)  // the gate reads the expert's input, still in xn
        add_sigmoid_gated(h, s.shared + mb.tok0 * d, s.buffers.xn + mb.tok0 * d,
                          layers_[static_cast<std::size_t>(l)].shared_expert_gate.data(), rows, d);
      else if (s.shared)  // DeepSeek: the shared experts' output added as it is
        add_inplace(h, s.shared + mb.tok0 * d, rows * d);
    }
    times.moe += now() - t0;
  }

 private:
  void mixer_and_gate(const LayerStep& s, const MicroBatch& mb, int64_t l, int index, DensePhaseTimes& times);
  void hint_next_layer(const float* xn, int64_t n, int64_t l, const std::vector<uint8_t>& prefill);
  const model::ModelConfig& c_;
  Matmul& mm_;
  MoeLayer& moe_;
  const router::RouterConfig& router_;
  FfnScratch& scratch_;
  std::vector<MoeWeights> layers_;  // [layer]
  std::vector<int64_t> moe_index_;  // per decoder layer, -1 for a dense one
};

void MoeMlpBlock::mixer_and_gate(const LayerStep& s, const MicroBatch& mb, int64_t l, int index, DensePhaseTimes& times) {
  const model::ModelConfig& c = c_;
  const StepBatch& b = s.batch;
  const int64_t d = c.hidden_size, t0 = mb.tok0, n = mb.tok1 - mb.tok0, m = moe_index_[static_cast<std::size_t>(l)];
  const MoeWeights& L = layers_[static_cast<std::size_t>(l)];
  const float* xn = s.buffers.xn + t0 * d;
  double s0 = now();
  s.mixer.forward(b, mb, l, s.buffers);
  double s1 = now();
  const std::vector<uint8_t> prefill(b.is_prefill.begin() + t0, b.is_prefill.begin() + t0 + n);
  router::RoutingDecision r = router::route(mm_, xn, n, L.gate, c.top_k, router_, prefill, c.router_bias ? L.gate_bias.data() : nullptr,
                                            c.router_correction_bias ? L.gate_correction_bias.data() : nullptr);
  for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) {
    const SeqChunk& ch = b.chunks[ci];
    if (!ch.routing) continue;
    const auto first = r.expert.begin() + (ch.first - t0) * c.top_k;
    (*ch.routing)[static_cast<std::size_t>(m)].insert((*ch.routing)[static_cast<std::size_t>(m)].end(), first, first + ch.count * c.top_k);
  }
  if (s.stats) {
    const std::vector<int64_t> req(b.request.begin() + t0, b.request.begin() + t0 + n);
    const std::vector<int32_t> pos(b.positions.begin() + t0, b.positions.begin() + t0 + n);
    s.stats->record(m, r, req, pos);
  }
  if (moe_.wants_hints()) hint_next_layer(xn, n, l, prefill);
  double s2 = now();
  moe_.start(m, index, xn, n, r);
  double s3 = now();
  if (s.shared && n > 0) swiglu_ffn_forward(mm_, xn, n, L.shared_expert, s.shared + t0 * d, scratch_);
  times.attention += s1 - s0;
  times.gate += s2 - s1;
  times.moe += s3 - s2;
  times.shared_expert += now() - s3;
}

// Gate prefetch: the next MoE layer's gate applied to this layer's expert input xn [n, d]; its rows
// per expert go to moe_.hint (the residual stream changes little in a layer, so this predicts most
// of the next layer's experts before its mixer has run).
void MoeMlpBlock::hint_next_layer(const float* xn, int64_t n, int64_t l, const std::vector<uint8_t>& prefill) {
  const model::ModelConfig& c = c_;
  int64_t next = l + 1;
  while (next < c.num_layers && moe_index_[static_cast<std::size_t>(next)] < 0) ++next;
  if (next >= c.num_layers || n == 0) return;
  const MoeWeights& N = layers_[static_cast<std::size_t>(next)];
  const router::RoutingDecision r =
      router::route(mm_, xn, n, N.gate, c.top_k, router_, prefill, c.router_bias ? N.gate_bias.data() : nullptr,
                    c.router_correction_bias ? N.gate_correction_bias.data() : nullptr);
  // Each token's likelier half of its predicted experts (the slots come best first): the other half
  // is used less often (bench shape at 2x, N = 1: 0.64 of the hints used against 0.57 with all of
  // them; decode median 56.0 against 49.0 tokens/s, N = 8 86.3 against 84.2), and a wrong guess costs a read.
  const int64_t k = c.top_k, kept = (k + 1) / 2;
  std::vector<int64_t> rows(static_cast<std::size_t>(c.num_experts), 0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < kept; ++j)
      if (const int32_t e = r.expert[static_cast<std::size_t>(t * k + j)]; e >= 0) ++rows[static_cast<std::size_t>(e)];
  moe_.hint(moe_index_[static_cast<std::size_t>(next)], rows);
}

}  // namespace

MlpBlocks make_mlp_blocks(io::DenseWeights& w, Matmul& mm, MoeLayer& moe, const router::RouterConfig& router, FfnScratch& scratch) {
  const model::ModelConfig& c = w.config;
  MlpBlocks out;
  MlpBlock* dense = nullptr;
  MlpBlock* experts = nullptr;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool is_moe = c.is_moe_layer(l);
    MlpBlock*& kind = is_moe ? experts : dense;
    if (!kind) {
      out.kinds.push_back(is_moe ? std::unique_ptr<MlpBlock>(std::make_unique<MoeMlpBlock>(c, mm, moe, router, scratch))
                                 : std::unique_ptr<MlpBlock>(std::make_unique<DenseMlpBlock>(c, mm, scratch)));
      kind = out.kinds.back().get();
    }
    kind->bind(l, w.layers.at(static_cast<std::size_t>(l)));
    out.of_layer.push_back(kind);
  }
  return out;
}

}  // namespace moerun::runtime

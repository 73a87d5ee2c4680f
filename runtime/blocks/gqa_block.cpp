// Grouped-query (or multi-head) attention over the K/V rows of each sequence: full or sliding, with
// the families' variants (q/k/v and output biases, q/k norms, sinks, the sigmoid output gate).
#include <cmath>

#include "runtime/blocks/mixer_block.hpp"
#include "runtime/dense_ops.hpp"

namespace moerun::runtime {
namespace {

// A layer's projections [rows, d] (wo [d, heads*hd]) and the variants' vectors (empty where the
// config has none).
struct GqaWeights {
  WeightMatrix wq, wq_gate, wk, wv, wo;
  std::vector<float> bq, bk, bv, bo, q_norm, k_norm, sinks;
};

class GqaBlock final : public MixerBlock {
 public:
  GqaBlock(const model::ModelConfig& c, Matmul& mm)
      : MixerBlock(c),
        mm_(mm),
        rope_(rope_frequencies(c.rope_theta, c.rope_dims(), c.rope)),
        layers_(static_cast<std::size_t>(c.num_layers)) {}

 protected:
  void bind_mixer(int64_t l, io::LayerTensors& t) override {
    GqaWeights& L = layers_.at(static_cast<std::size_t>(l));
    t.take({{"wq", &L.wq}, {"wq_gate", &L.wq_gate}, {"wk", &L.wk}, {"wv", &L.wv}, {"wo", &L.wo}},
           {{"bq", &L.bq}, {"bk", &L.bk}, {"bv", &L.bv}, {"bo", &L.bo}, {"q_norm", &L.q_norm}, {"k_norm", &L.k_norm}, {"sinks", &L.sinks}});
    pack_for_decode(mm_, {&L.wq, &L.wk, &L.wv, &L.wo, &L.wq_gate});
  }
  void mix(const StepBatch& b, const MicroBatch& mb, int64_t l, const StepBuffers& s, float* out) override {
    const model::ModelConfig& c = c_;
    const int64_t d = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim;
    const int64_t t0 = mb.tok0, n = mb.tok1 - mb.tok0;
    const GqaWeights& L = layers_[static_cast<std::size_t>(l)];
    const float* xn = s.xn + t0 * d;
    float* q = s.q + t0 * H * hd;
    float* k = s.k + t0 * KV * hd;
    float* v = s.v + t0 * KV * hd;
    float* attn = s.attn + t0 * H * hd;
    project(L, xn, n, b.positions.data() + t0, q, k, v);
    AttentionShape shape{H, KV, hd, 1.0f / std::sqrt(static_cast<float>(hd)), c.window_of(l), c.attention_sinks ? L.sinks.data() : nullptr};
    for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) {
      const SeqChunk& ch = b.chunks[ci];
      const int64_t off = ch.first - t0;
      RowState& rows = ch.kv->row_state(l);
      rows.append(k + off * KV * hd, v + off * KV * hd, ch.count);
      attention_forward(q + off * H * hd, rows.k.data(), rows.v.data(), rows.start, ch.pos0, ch.count, shape, attn + off * H * hd);
    }
    if (c.attention_output_gate) {  // Qwen3-Next: attn * sigmoid(x Wq_gate), element by element
      float* gate = s.mix + t0 * H * hd;
      mm_.linear(xn, n, L.wq_gate, gate);
      multiply_by_sigmoid(attn, gate, n * H * hd);
    }
    mm_.linear(attn, n, L.wo, out);
    if (c.attention_out_bias) add_row_bias(out, n, d, L.bo.data());
  }

 private:
  // q, k, v of n rows: the projections, their biases and norms, RoPE.
  void project(const GqaWeights& L, const float* xn, int64_t n, const int32_t* positions, float* q, float* k, float* v) {
    const model::ModelConfig& c = c_;
    const int64_t H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    mm_.linear(xn, n, L.wq, q);
    mm_.linear(xn, n, L.wk, k);
    mm_.linear(xn, n, L.wv, v);
    if (c.attention_bias) {
      add_row_bias(q, n, H * hd, L.bq.data());
      add_row_bias(k, n, KV * hd, L.bk.data());
      add_row_bias(v, n, KV * hd, L.bv.data());
    }
    if (c.qk_norm == model::QkNorm::Projection) {  // over the whole projection, before the heads are split (OLMoE)
      rms_norm(q, n, H * hd, L.q_norm.data(), eps, q);
      rms_norm(k, n, KV * hd, L.k_norm.data(), eps, k);
    } else if (c.qk_norm == model::QkNorm::PerHead) {  // each head's head_dim values (Qwen3)
      rms_norm(q, n * H, hd, L.q_norm.data(), eps, q);
      rms_norm(k, n * KV, hd, L.k_norm.data(), eps, k);
    }
    rope_apply(q, n, H, hd, positions, rope_);
    rope_apply(k, n, KV, hd, positions, rope_);
  }

  Matmul& mm_;
  RopeFrequencies rope_;
  std::vector<GqaWeights> layers_;  // [layer]; empty for the other kinds' layers
};

}  // namespace

std::unique_ptr<MixerBlock> make_gqa_block(const model::ModelConfig& c, Matmul& mm) {
  return std::make_unique<GqaBlock>(c, mm);
}

}  // namespace moerun::runtime

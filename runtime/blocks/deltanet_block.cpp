// Gated DeltaNet (Qwen3-Next, Qwen3.5) as a layer block: each chunk of a micro-batch runs through
// its sequence's recurrent state (the conv's last inputs and S), which is the layer state.
#include <algorithm>

#include "runtime/blocks/mixer_block.hpp"
#include "runtime/dense_ops.hpp"
#include "runtime/blocks/gated_deltanet.hpp"

namespace moerun::runtime {
namespace {

// Chunks of at most this many tokens (decode's) run a sequence per thread.
constexpr int64_t kWholeSequenceTokens = 4;

// A linear layer's weights: w_qkv [conv channels, d] (q, k, v of every head in turn), w_z
// [v_heads*v_dim, d], w_b and w_a [v_heads, d]; conv [channels, kernel], dt_bias and A_log
// [v_heads], norm [v_dim]; wo, its out_proj [d, v_heads*v_dim].
struct DeltaNetWeights {
  WeightMatrix qkv, z, b, a, wo;
  std::vector<float> conv, dt_bias, A_log, norm;
};

class DeltaNetBlock final : public MixerBlock {
 public:
  DeltaNetBlock(const model::ModelConfig& c, Matmul& mm) : MixerBlock(c), mm_(mm), layers_(static_cast<std::size_t>(c.num_layers)) {}

 protected:
  void bind_mixer(int64_t l, io::LayerTensors& t) override {
    DeltaNetWeights& L = layers_.at(static_cast<std::size_t>(l));
    t.take({{"linear/w_qkv", &L.qkv}, {"linear/w_z", &L.z}, {"linear/w_b", &L.b}, {"linear/w_a", &L.a}, {"wo", &L.wo}},
           {{"linear/conv", &L.conv}, {"linear/dt_bias", &L.dt_bias}, {"linear/A_log", &L.A_log}, {"linear/norm", &L.norm}});
    pack_for_decode(mm_, {&L.wo, &L.qkv, &L.z, &L.b, &L.a});
  }
  void mix(const StepBatch& b, const MicroBatch& mb, int64_t l, const StepBuffers& s, float* out) override {
    const model::ModelConfig& c = c_;
    const DeltaNetShape& shape = c.linear;
    const int64_t t0 = mb.tok0, n = mb.tok1 - mb.tok0, C = shape.conv_channels(), vw = shape.value_width(), Hv = shape.v_heads;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const DeltaNetWeights& L = layers_[static_cast<std::size_t>(l)];
    const float* xn = s.xn + t0 * c.hidden_size;
    float* heads = s.attn + t0 * vw;
    // mix: [T, C] q/k/v after the conv, [T, vw] z, [T, Hv] each of b, a, g, beta; then [T, C] for
    // the chunks' q, k, v apart (each chunk's [count, kw], [count, kw], [count, vw] at its rows).
    const int64_t T = s.tokens;
    float* qkv = s.mix;
    float* z = qkv + T * C;
    float* bb = z + T * vw;
    float* aa = bb + T * Hv;
    float* g = aa + T * Hv;
    float* beta = g + T * Hv;
    float* split = beta + T * Hv;
    qkv += t0 * C, z += t0 * vw, bb += t0 * Hv, aa += t0 * Hv, g += t0 * Hv, beta += t0 * Hv;
    mm_.linear(xn, n, L.qkv, qkv);
    mm_.linear(xn, n, L.z, z);
    mm_.linear(xn, n, L.b, bb);
    mm_.linear(xn, n, L.a, aa);
    delta_gates(aa, bb, n, Hv, L.A_log.data(), L.dt_bias.data(), g, beta);
    // Decode's sequences (a token or a few each) go to the threads whole: one parallel region for
    // the step instead of a few per sequence, each too small to share (ab_builds, bench-peer's
    // qwen3_5_moe q4: decode 1.04x at 8 sequences, 1.03x at 32).
    // A prompt's chunk keeps every thread on its heads and rows. Either way each sequence's
    // arithmetic is the same, and so are its bits.
    int64_t longest = 0;
    for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) longest = std::max(longest, b.chunks[ci].count);
    const auto chunk = [&](std::size_t ci) {
      const SeqChunk& ch = b.chunks[ci];
      const int64_t off = ch.first - t0;
      mix_chunk(L, ch.kv->recurrent(l), qkv + off * C, g + off * Hv, beta + off * Hv, ch.count, split + off * C, heads + off * vw);
    };
    // (Not one loop with an `if` clause: inside a region serialised by it, libgomp runs the
    // chunk's own regions on one thread too.)
    if (mb.chunk1 - mb.chunk0 >= 2 && longest <= kWholeSequenceTokens) {
#pragma omp parallel for schedule(dynamic, 1)
      for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) chunk(ci);
    } else {
      for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) chunk(ci);
    }
    gated_rms_norm(heads, z, n, Hv, shape.v_dim, L.norm.data(), eps);
    mm_.linear(heads, n, L.wo, out);
  }

 private:
  // One sequence's m tokens x [m, C] through its state: the conv, then the delta rule into out [m, vw].
  void mix_chunk(const DeltaNetWeights& L, DeltaNetState& st, float* x, const float* g, const float* beta, int64_t m, float* split,
                 float* out) {
    const DeltaNetShape& shape = c_.linear;
    const int64_t C = shape.conv_channels(), kw = shape.key_width(), vw = shape.value_width();
    causal_conv1d_silu(x, m, C, L.conv.data(), shape.conv_kernel, st.conv.data());
    float *q = split, *k = q + m * kw, *v = k + m * kw;
#pragma omp parallel for schedule(static) if (m * C >= kParallelElements)
    for (int64_t t = 0; t < m; ++t) {
      std::copy_n(x + t * C, kw, q + t * kw);
      std::copy_n(x + t * C + kw, kw, k + t * kw);
      std::copy_n(x + t * C + 2 * kw, vw, v + t * vw);
    }
    // Token by token, prompt chunks too: the chunked form equals it to 1e-5 but runs no faster here
    // (bench deltanet), and the recurrence gives a prompt the same bits however it is split
    // (prefix cache, micro-batches, --max-batch-tokens).
    gated_delta_rule(q, k, v, g, beta, m, shape, st.recurrent.data(), out, DeltaRuleForm::Recurrent);
  }

  Matmul& mm_;
  std::vector<DeltaNetWeights> layers_;  // [layer]
};

}  // namespace

std::unique_ptr<MixerBlock> make_deltanet_block(const model::ModelConfig& c, Matmul& mm) {
  return std::make_unique<DeltaNetBlock>(c, mm);
}

}  // namespace moerun::runtime

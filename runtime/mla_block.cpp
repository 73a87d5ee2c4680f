// DeepSeek's multi-head latent attention as a layer block: the latent and RoPE key rows are the
// layer state (runtime/mla_attention computes the projections and the attention).
#include "runtime/attention_block.hpp"
#include "runtime/dense_ops.hpp"

namespace moerun::runtime {
namespace {

class MlaBlock final : public AttentionBlock {
 public:
  MlaBlock(const io::DenseWeights& w, Matmul& mm, MlaMode mode) : AttentionBlock(w), mm_(mm), mla_(w, mm, mode) {}

 protected:
  void mix(const StepBatch& b, const MicroBatch& mb, int64_t l, const StepBuffers& s, float* out) override {
    const model::ModelConfig& c = w_.config;
    const int64_t t0 = mb.tok0, n = mb.tok1 - mb.tok0;
    const io::DenseLayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
    const float* xn = s.xn + t0 * c.hidden_size;
    const int64_t row = c.kv_k_dim();
    float* rows = s.k + t0 * row;  // the cache rows: latent and RoPE key
    mla_.project(l, xn, n, b.positions.data() + t0, rows);
    std::vector<MlaChunk> chunks;
    for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) {
      const SeqChunk& ch = b.chunks[ci];
      const int64_t off = ch.first - t0;
      ch.kv->append(l, rows + off * row, nullptr, ch.count);
      // Its prompt tokens (they come first) and the generated ones as two chunks: each token's form
      // is what it is (MlaMode::Auto), however the scheduler cut the sequence.
      int64_t prompt = 0;
      while (prompt < ch.count && b.is_prefill[static_cast<std::size_t>(ch.first + prompt)]) ++prompt;
      if (prompt > 0) chunks.push_back({off, prompt, ch.pos0, ch.kv, true});
      if (prompt < ch.count) chunks.push_back({off + prompt, ch.count - prompt, ch.pos0 + prompt, ch.kv, false});
    }
    float* heads = s.attn + t0 * c.attention_out_dim();
    mla_.attend(l, chunks, n, heads);
    mm_.linear(heads, n, L.wo, out);
  }

 private:
  Matmul& mm_;
  MlaAttention mla_;
};

}  // namespace

std::unique_ptr<AttentionBlock> make_mla_block(const io::DenseWeights& w, Matmul& mm, MlaMode mode) {
  return std::make_unique<MlaBlock>(w, mm, mode);
}

}  // namespace moerun::runtime

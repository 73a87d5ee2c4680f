// DeepSeek's multi-head latent attention as a layer block: the latent and RoPE key rows are the
// layer state (runtime/blocks/mla_attention computes the projections and the attention). With DeepSeek
// Sparse Attention (DeepSeek-V3.2) the indexer's key joins each row and every query attends to the
// positions the indexer picks (runtime/blocks/dsa_indexer).
#include <algorithm>
#include <limits>
#include <map>

#include "base/error.hpp"
#include "runtime/blocks/mixer_block.hpp"
#include "runtime/dense_ops.hpp"

namespace moerun::runtime {
namespace {

// A layer's weights: MLA's, and its indexer's where the model has DSA.
struct MlaLayerWeights {
  MlaWeights mla;
  DsaIndexerWeights indexer;
};

class MlaBlock final : public MixerBlock {
 public:
  MlaBlock(const model::ModelConfig& c, Matmul& mm, MlaMode mode)
      : MixerBlock(c), mm_(mm), mla_(c, mm, mode), layers_(static_cast<std::size_t>(c.num_layers)) {
    if (c.is_dsa()) indexer_ = std::make_unique<DsaIndexer>(c, mm);
  }

 protected:
  void bind_mixer(int64_t l, io::LayerTensors& t) override {
    MlaLayerWeights& L = layers_.at(static_cast<std::size_t>(l));
    L.mla = MlaWeights::take(t, c_, mm_);
    L.indexer = DsaIndexerWeights::take(t, mm_);
  }
  void mix(const StepBatch& b, const MicroBatch& mb, int64_t l, const StepBuffers& s, float* out) override {
    const model::ModelConfig& c = c_;
    const int64_t t0 = mb.tok0, n = mb.tok1 - mb.tok0;
    const MlaLayerWeights& L = layers_[static_cast<std::size_t>(l)];
    const float* xn = s.xn + t0 * c.hidden_size;
    const int64_t row = c.kv_k_dim();
    float* rows = s.k + t0 * row;  // the cache rows: latent and RoPE key
    mla_.project(L.mla, xn, n, b.positions.data() + t0, rows);
    if (indexer_ && !c.dsa.shared(l))
      indexer_->project(L.indexer, xn, mla_.q_latent(), n, b.positions.data() + t0, rows);
    else if (indexer_)
      clear_index_keys(rows, n);
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
    if (indexer_) select(l, mb.tok0, chunks);
    float* heads = s.attn + t0 * c.attention_out_dim();
    mla_.attend(L.mla, l, chunks, n, heads);
    if (indexer_ && !c.dsa.shared(l)) poison_nonfinite_choices(n, heads);
    mm_.linear(heads, n, L.mla.wo, out);
  }

 private:
  // DSA: the positions each query of each chunk attends, where some query has more earlier
  // positions than index_topk (else the chunk attends as dense MLA does: the same positions). A
  // shared layer (GLM-5) takes the last full layer's choice for the same micro-batch.
  void select(int64_t l, int64_t tok0, std::vector<MlaChunk>& chunks) {
    std::vector<DsaSelection>& sel = selections_[tok0];
    const bool shared = c_.dsa.shared(l);
    if (!shared)
      sel.assign(chunks.size(), DsaSelection{});
    else if (sel.size() != chunks.size())
      fail(ErrorKind::Internal, "DSA: layer ", l, " shares a choice made for other chunks");
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      MlaChunk& ch = chunks[i];
      if (indexer_->attends_all(ch.pos0 + ch.count - 1)) continue;
      if (!shared) indexer_->select(*ch.kv, l, ch.first, ch.count, ch.pos0, sel[i]);
      ch.selection = &sel[i];
    }
  }
  // A query whose indexer values were not finite attends by a choice made from NaN: its output is
  // made NaN, so the forward's check ends its request with an error naming this layer.
  void poison_nonfinite_choices(int64_t n, float* heads) const {
    const int64_t w = c_.attention_out_dim();
    for (int64_t t = 0; t < n; ++t)
      if (indexer_->row_nonfinite(t)) std::fill(heads + t * w, heads + (t + 1) * w, std::numeric_limits<float>::quiet_NaN());
  }
  // A shared layer's rows keep the index key's columns, zero (nothing reads them).
  void clear_index_keys(float* rows, int64_t n) const {
    const model::ModelConfig& c = c_;
    const int64_t stride = c.kv_k_dim(), col = c.mla.latent_width();
    for (int64_t t = 0; t < n; ++t) std::fill(rows + t * stride + col, rows + (t + 1) * stride, 0.0f);
  }
  Matmul& mm_;
  MlaAttention mla_;
  std::unique_ptr<DsaIndexer> indexer_;
  std::vector<MlaLayerWeights> layers_;  // [layer]
  std::map<int64_t, std::vector<DsaSelection>> selections_;  // by micro-batch (its first token)
};

}  // namespace

std::unique_ptr<MixerBlock> make_mla_block(const model::ModelConfig& c, Matmul& mm, MlaMode mode) {
  return std::make_unique<MlaBlock>(c, mm, mode);
}

}  // namespace moerun::runtime

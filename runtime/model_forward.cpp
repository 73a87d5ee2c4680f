// Router-rank forward step.
#include "runtime/model_forward.hpp"

#include <chrono>

#include "runtime/dense_ops.hpp"

namespace moerun::runtime {
namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
float* fbuf(AlignedBuffer& b, int64_t n) {
  b.resize(static_cast<std::size_t>(n) * sizeof(float));
  return b.as<float>();
}
}  // namespace

int64_t StepBatch::emitting() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.emit;
  return n;
}

ModelForward::ModelForward(const io::DenseWeights& weights, Matmul& mm, MoeLayer& moe, const router::RouterConfig& router)
    : w_(weights), mm_(mm), moe_(moe), router_(router) {}

void ModelForward::forward(const StepBatch& b, std::vector<float>& logits, RoutingStats* stats) {
  const io::ModelConfig& c = w_.config;
  const int64_t T = b.tokens(), d = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim;
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* h = fbuf(h_, T * d);
  float* xn = fbuf(xn_, T * d);
  float* q = fbuf(q_, T * H * hd);
  float* k = fbuf(k_, T * KV * hd);
  float* v = fbuf(v_, T * KV * hd);
  float* attn = fbuf(attn_, T * H * hd);
  float* tmp = fbuf(tmp_, T * d);
  embed_tokens(w_.embed_tokens.data(), b.ids.data(), T, d, h);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const io::DenseLayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
    double t0 = now();
    rms_norm(h, T, d, L.attn_norm.data(), eps, xn);
    mm_.linear(xn, T, L.wq, q);
    mm_.linear(xn, T, L.wk, k);
    mm_.linear(xn, T, L.wv, v);
    rope_apply(q, T, H, hd, b.positions.data(), c.rope_theta);
    rope_apply(k, T, KV, hd, b.positions.data(), c.rope_theta);
    for (const SeqChunk& ch : b.chunks) {
      ch.kv->append(l, k + ch.first * KV * hd, v + ch.first * KV * hd, ch.count);
      attention_forward(q + ch.first * H * hd, ch.kv->k[l].data(), ch.kv->v[l].data(), ch.pos0, ch.count, H, KV, hd,
                        attn + ch.first * H * hd);
    }
    mm_.linear(attn, T, L.wo, tmp);
    add_inplace(h, tmp, T * d);
    rms_norm(h, T, d, L.ffn_norm.data(), eps, xn);
    double t1 = now();
    router::RoutingDecision r = router::route(mm_, xn, T, L.gate, c.top_k, router_, b.is_prefill);
    if (stats) stats->record(l, r, b.request, b.positions);
    double t2 = now();
    moe_.forward(l, xn, T, r, tmp);
    add_inplace(h, tmp, T * d);
    double t3 = now();
    times_.attention += t1 - t0;
    times_.gate += t2 - t1;
    times_.moe += t3 - t2;
  }
  double t4 = now();
  const int64_t n = b.emitting();
  float* last = fbuf(xn_, n * d);
  int64_t i = 0;
  for (const SeqChunk& ch : b.chunks)
    if (ch.emit) rms_norm(h + (ch.first + ch.count - 1) * d, 1, d, w_.final_norm.data(), eps, last + d * i++);
  logits.resize(static_cast<std::size_t>(n * c.vocab_size));
  mm_.linear(last, n, w_.lm_head, logits.data());
  times_.head += now() - t4;
}

}  // namespace moerun::runtime

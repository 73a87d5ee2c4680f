// Router-rank forward step.
#include "runtime/model_forward.hpp"

#include <array>
#include <chrono>
#include <cmath>

#include "base/error.hpp"
#include "io/dense_quant_cache.hpp"
#include "io/model_location.hpp"
#include "runtime/dense_ops.hpp"
#include "runtime/gated_deltanet.hpp"

namespace moerun::runtime {
namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
float* fbuf(AlignedBuffer& b, int64_t n) {
  b.resize(static_cast<std::size_t>(n) * sizeof(float));
  return b.as<float>();
}
}  // namespace

int64_t StepBatch::decode_tokens() const {
  int64_t n = 0;
  for (uint8_t p : is_prefill) n += p ? 0 : 1;
  return n;
}

int64_t StepBatch::emitting() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.emit;
  return n;
}

int64_t StepBatch::logit_rows() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.logit_rows();
  return n;
}

std::vector<MicroBatch> split_micro_batches(const StepBatch& b, int m) {
  std::vector<MicroBatch> out(static_cast<std::size_t>(m));
  const int64_t T = b.tokens();
  std::size_t c = 0;
  int64_t tok = 0;
  for (int i = 0; i < m; ++i) {
    MicroBatch& mb = out[static_cast<std::size_t>(i)];
    mb.tok0 = tok;
    mb.chunk0 = c;
    const int64_t target = T * (i + 1) / m;  // cumulative token target for this boundary
    while (c < b.chunks.size() && (i == m - 1 || tok + b.chunks[c].count / 2 < target)) tok += b.chunks[c++].count;
    mb.tok1 = tok;
    mb.chunk1 = c;
  }
  return out;
}

int quantize_dense_weights(Matmul& mm, io::DenseWeights& w, WeightScheme s) {
  int n = 0;
  if (s == WeightScheme::Plain) return n;
  for (auto& [path, m] : io::quantizable_dense_matrices(w))
    if (m->scheme == WeightScheme::Plain) {
      mm.quantize(*m, s);
      ++n;
    }
  return n;
}

int make_dense_cache(const std::string& dir, WeightScheme s) {
  io::DenseWeights w = io::load_dense_weights(io::ModelLocation(dir), s);
  Matmul mm;
  const int n = quantize_dense_weights(mm, w, s);
  if (n > 0 && !io::write_dense_cache(io::dense_cache_path(dir, s), s, w, w.source_xxh64))
    fail(ErrorKind::Io, io::dense_cache_path(dir, s), ": cannot write the dense cache");
  return n;
}

void pack_dense_weights(Matmul& mm, io::DenseWeights& w) {
  // Packed for the row counts of decode steps (a batch of sequences); the same layout serves the
  // larger prefill steps. Quantized matrices are already in their form (Matmul::pack leaves them).
  constexpr int64_t kTypicalRows = 32;
  const bool mla = w.config.attention_type == model::AttentionType::Mla;
  mm.pack(w.lm_head, kTypicalRows);
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    io::DenseLayerWeights& l = w.layers[i];
    if (mla) prepare_mla_weights(mm, w.config, l);  // before anything else: it reads wkv_b row-major
    for (WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.wq_a, &l.wq_b, &l.wkv_a, &l.wq_gate, &l.lin_qkv, &l.lin_z, &l.lin_b, &l.lin_a})
      if (m->rows > 0) mm.pack(*m, kTypicalRows);
    if (!w.config.is_moe_layer(static_cast<int64_t>(i))) {
      for (WeightMatrix* m : {&l.mlp.w1, &l.mlp.w3, &l.mlp.w2}) mm.pack(*m, kTypicalRows);
      continue;
    }
    mm.pack(l.gate, kTypicalRows);
    if (w.config.shared_expert_intermediate_size > 0) pack_ffn(mm, l.shared_expert);
  }
}

ModelForward::ModelForward(const io::DenseWeights& weights, Matmul& mm, MoeLayer& moe, const router::RouterConfig& router,
                           int micro_batches, MlaMode mla_mode)
    : w_(weights), mm_(mm), moe_(moe), router_(router), micro_batches_(micro_batches),
      rope_(rope_frequencies(weights.config.rope_theta, weights.config.rope_dims(), weights.config.rope)) {
  const model::ModelConfig& c = weights.config;
  // Top-k of the logits then a softmax over the chosen (gpt-oss) is softmax, top-k, renormalise:
  // exp(l_e) / sum over the chosen of exp(l_j) either way.
  router_.renormalize = c.norm_topk_prob || c.router_scoring == model::RouterScoring::TopKSoftmax;
  router_.sigmoid = c.router_scoring == model::RouterScoring::Sigmoid;
  router_.groups = c.router_groups;
  router_.topk_groups = c.router_topk_groups;
  router_.group_top2 = c.router_group_score == model::GroupScore::Top2Sum;
  router_.routed_scaling = static_cast<float>(c.routed_scaling_factor);
  if (c.attention_type == model::AttentionType::Mla) mla_ = std::make_unique<MlaAttention>(weights, mm, mla_mode);
  for (int64_t l = 0; l < weights.config.num_layers; ++l) moe_index_.push_back(weights.config.moe_index(l));
}

void ModelForward::attention(const StepBatch& b, const MicroBatch& mb, int64_t l) {
  const model::ModelConfig& c = w_.config;
  if (c.is_linear_layer(l)) return linear_attention(b, mb, l);
  const int64_t d = c.hidden_size, H = c.num_heads, KV = c.num_kv_heads, hd = c.head_dim;
  const int64_t t0 = mb.tok0, n = mb.tok1 - mb.tok0;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const io::DenseLayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
  float* h = h_.as<float>() + t0 * d;
  float* xn = xn_.as<float>() + t0 * d;
  float* q = q_.as<float>() + t0 * H * hd;
  float* k = k_.as<float>() + t0 * KV * hd;
  float* v = v_.as<float>() + t0 * KV * hd;
  float* attn = attn_.as<float>() + t0 * H * hd;
  float* tmp = tmp_.as<float>() + t0 * d;
  if (n > 0 && mla_) {
    rms_norm(h, n, d, L.attn_norm.data(), eps, xn);
    const int64_t row = c.kv_k_dim();
    float* rows = k_.as<float>() + t0 * row;  // the cache rows: latent and RoPE key
    mla_->project(l, xn, n, b.positions.data() + t0, rows);
    std::vector<MlaChunk> chunks;
    for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) {
      const SeqChunk& ch = b.chunks[ci];
      const int64_t off = ch.first - t0;
      ch.kv->append(l, rows + off * row, nullptr, ch.count);
      chunks.push_back({off, ch.count, ch.pos0, ch.kv});
    }
    float* out = attn_.as<float>() + t0 * c.attention_out_dim();
    mla_->attend(l, chunks, n, out);
    mm_.linear(out, n, L.wo, tmp);
    add_inplace(h, tmp, n * d);
    rms_norm(h, n, d, L.ffn_norm.data(), eps, xn);
  } else if (n > 0) {
    rms_norm(h, n, d, L.attn_norm.data(), eps, xn);
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
    rope_apply(q, n, H, hd, b.positions.data() + t0, rope_);
    rope_apply(k, n, KV, hd, b.positions.data() + t0, rope_);
    AttentionShape shape{H, KV, hd, 1.0f / std::sqrt(static_cast<float>(hd)), c.window_of(l),
                         c.attention_sinks ? L.sinks.data() : nullptr};
    for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) {
      const SeqChunk& ch = b.chunks[ci];
      const int64_t off = ch.first - t0;
      ch.kv->append(l, k + off * KV * hd, v + off * KV * hd, ch.count);
      attention_forward(q + off * H * hd, ch.kv->k[l].data(), ch.kv->v[l].data(), ch.kv->start[l], ch.pos0, ch.count, shape,
                        attn + off * H * hd);
    }
    if (c.attention_output_gate) {  // Qwen3-Next: attn * sigmoid(x Wq_gate), element by element
      float* gate = mix_.as<float>() + t0 * H * hd;
      mm_.linear(xn, n, L.wq_gate, gate);
      multiply_by_sigmoid(attn, gate, n * H * hd);
    }
    mm_.linear(attn, n, L.wo, tmp);
    if (c.attention_out_bias) add_row_bias(tmp, n, d, L.bo.data());
    add_inplace(h, tmp, n * d);
    rms_norm(h, n, d, L.ffn_norm.data(), eps, xn);
  }
}

void ModelForward::linear_attention(const StepBatch& b, const MicroBatch& mb, int64_t l) {
  const model::ModelConfig& c = w_.config;
  const DeltaNetShape& s = c.linear;
  const int64_t d = c.hidden_size, t0 = mb.tok0, n = mb.tok1 - mb.tok0, C = s.conv_channels(), kw = s.key_width(),
                vw = s.value_width(), Hv = s.v_heads;
  if (n == 0) return;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const io::DenseLayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
  float* h = h_.as<float>() + t0 * d;
  float* xn = xn_.as<float>() + t0 * d;
  float* tmp = tmp_.as<float>() + t0 * d;
  float* out = attn_.as<float>() + t0 * vw;
  // mix_: [T, C] q/k/v after the conv, [T, vw] z, [T, Hv] each of b, a, g, beta; then one chunk's
  // q, k, v apart ([count, kw], [count, kw], [count, vw]) at the end.
  const int64_t T = b.tokens();
  float* qkv = mix_.as<float>();
  float* z = qkv + T * C;
  float* bb = z + T * vw;
  float* aa = bb + T * Hv;
  float* g = aa + T * Hv;
  float* beta = g + T * Hv;
  float* split = beta + T * Hv;
  qkv += t0 * C, z += t0 * vw, bb += t0 * Hv, aa += t0 * Hv, g += t0 * Hv, beta += t0 * Hv;
  rms_norm(h, n, d, L.attn_norm.data(), eps, xn);
  mm_.linear(xn, n, L.lin_qkv, qkv);
  mm_.linear(xn, n, L.lin_z, z);
  mm_.linear(xn, n, L.lin_b, bb);
  mm_.linear(xn, n, L.lin_a, aa);
  delta_gates(aa, bb, n, Hv, L.lin_A_log.data(), L.lin_dt_bias.data(), g, beta);
  for (std::size_t ci = mb.chunk0; ci < mb.chunk1; ++ci) {
    const SeqChunk& ch = b.chunks[ci];
    const int64_t off = ch.first - t0, m = ch.count;
    DeltaNetState& st = ch.kv->linear[static_cast<std::size_t>(l)];
    float* x = qkv + off * C;
    causal_conv1d_silu(x, m, C, L.lin_conv.data(), s.conv_kernel, st.conv.data());
    float *q = split, *k = q + m * kw, *v = k + m * kw;
    for (int64_t t = 0; t < m; ++t) {
      std::copy_n(x + t * C, kw, q + t * kw);
      std::copy_n(x + t * C + kw, kw, k + t * kw);
      std::copy_n(x + t * C + 2 * kw, vw, v + t * vw);
    }
    // Token by token, prompt chunks too: the chunked form equals it to 1e-5 but runs no faster here
    // (bench deltanet), and the recurrence gives a prompt the same bits however it is split
    // (prefix cache, micro-batches, --max-batch-tokens).
    gated_delta_rule(q, k, v, g + off * Hv, beta + off * Hv, m, s, st.recurrent.data(), out + off * vw,
                     DeltaRuleForm::Recurrent);
  }
  gated_rms_norm(out, z, n, Hv, s.v_dim, L.lin_norm.data(), eps);
  mm_.linear(out, n, L.wo, tmp);
  add_inplace(h, tmp, n * d);
  rms_norm(h, n, d, L.ffn_norm.data(), eps, xn);
}

void ModelForward::attention_and_gate(const StepBatch& b, const MicroBatch& mb, int64_t l, RoutingStats* stats, int index) {
  const model::ModelConfig& c = w_.config;
  const int64_t d = c.hidden_size, t0 = mb.tok0, n = mb.tok1 - mb.tok0, m = moe_index_[static_cast<std::size_t>(l)];
  const io::DenseLayerWeights& L = w_.layers[static_cast<std::size_t>(l)];
  const float* xn = xn_.as<float>() + t0 * d;
  double s0 = now();
  attention(b, mb, l);
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
  if (stats) {
    const std::vector<int64_t> req(b.request.begin() + t0, b.request.begin() + t0 + n);
    const std::vector<int32_t> pos(b.positions.begin() + t0, b.positions.begin() + t0 + n);
    stats->record(m, r, req, pos);
  }
  if (moe_.wants_hints()) hint_next_layer(xn, n, l, prefill);
  double s2 = now();
  moe_.start(m, index, xn, n, r);
  double s3 = now();
  // The shared expert runs while the routed experts work on this micro-batch; forward() adds it.
  if (c.shared_expert_intermediate_size > 0 && n > 0)
    swiglu_ffn_forward(mm_, xn, n, L.shared_expert, shared_.as<float>() + t0 * d, shared_scratch_);
  times_.attention += s1 - s0;
  times_.gate += s2 - s1;
  times_.moe += s3 - s2;
  times_.shared_expert += now() - s3;
}

void ModelForward::hint_next_layer(const float* xn, int64_t n, int64_t l, const std::vector<uint8_t>& prefill) {
  const model::ModelConfig& c = w_.config;
  int64_t next = l + 1;
  while (next < c.num_layers && moe_index_[static_cast<std::size_t>(next)] < 0) ++next;
  if (next >= c.num_layers || n == 0) return;
  const io::DenseLayerWeights& N = w_.layers[static_cast<std::size_t>(next)];
  const router::RoutingDecision r = router::route(mm_, xn, n, N.gate, c.top_k, router_, prefill, c.router_bias ? N.gate_bias.data() : nullptr,
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

void ModelForward::dense_layer(const StepBatch& b, const std::vector<MicroBatch>& mbs, int64_t l) {
  const int64_t T = b.tokens(), d = w_.config.hidden_size;
  double t0 = now();
  for (const MicroBatch& mb : mbs) attention(b, mb, l);
  double t1 = now();
  if (T > 0) {
    float* tmp = tmp_.as<float>();
    swiglu_ffn_forward(mm_, xn_.as<float>(), T, w_.layers[static_cast<std::size_t>(l)].mlp, tmp, shared_scratch_);
    add_inplace(h_.as<float>(), tmp, T * d);
  }
  times_.attention += t1 - t0;
  times_.dense_mlp += now() - t1;
}

namespace {
// The step buffers' sizes in floats, for T tokens, in ModelForward's member order.
std::array<int64_t, 9> step_buffer_floats(const model::ModelConfig& c, int64_t T) {
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim;
  const model::LinearAttentionShape& s = c.linear;
  // Gated DeltaNet: q/k/v, z, b, a, g, beta for the step and one chunk's q, k, v apart; the gate of gated attention.
  const int64_t mix = std::max(c.num_linear_layers() > 0 ? T * (2 * s.conv_channels() + s.value_width() + 4 * s.v_heads) : 0,
                               c.attention_output_gate ? T * q : 0);
  const int64_t out = std::max({q, c.attention_out_dim(), c.num_linear_layers() > 0 ? s.value_width() : 0});
  return {T * d, T * d, T * q, T * c.kv_k_dim(), T * c.kv_v_dim(), T * out, T * d, c.shared_expert_intermediate_size > 0 ? T * d : 0, mix};
}
}  // namespace

int64_t ModelForward::step_buffer_bytes(const model::ModelConfig& c, int64_t T) {
  int64_t n = 0;
  for (int64_t f : step_buffer_floats(c, T)) n += f;
  return n * static_cast<int64_t>(sizeof(float));
}

void ModelForward::reserve(int64_t T) {
  const std::array<int64_t, 9> n = step_buffer_floats(w_.config, T);
  std::size_t i = 0;
  for (auto* buf : {&h_, &xn_, &q_, &k_, &v_, &attn_, &tmp_, &shared_, &mix_}) {
    std::fill_n(fbuf(*buf, n[i]), n[i], 0.0f);
    ++i;
  }
}

void ModelForward::forward(const StepBatch& b, std::vector<float>& logits, RoutingStats* stats) {
  const model::ModelConfig& c = w_.config;
  const int64_t T = b.tokens(), d = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::array<int64_t, 9> sizes = step_buffer_floats(c, T);
  float* h = fbuf(h_, sizes[0]);
  fbuf(xn_, sizes[1]);
  fbuf(q_, sizes[2]);
  fbuf(k_, sizes[3]);
  fbuf(v_, sizes[4]);
  fbuf(attn_, sizes[5]);
  float* tmp = fbuf(tmp_, sizes[6]);
  const bool shared = c.shared_expert_intermediate_size > 0;
  float* sh = shared ? fbuf(shared_, sizes[7]) : nullptr;
  fbuf(mix_, sizes[8]);
  embed_tokens(w_.embed_tokens.data, w_.embed_tokens.dtype, d, b.ids.data(), T, h);
  const std::vector<MicroBatch> mbs = split_micro_batches(b, micro_batches_);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (moe_index_[static_cast<std::size_t>(l)] < 0) {
      dense_layer(b, mbs, l);
      continue;
    }
    // Ping-pong: micro-batch i+1's attention runs while micro-batch i is with the experts.
    for (int i = 0; i < micro_batches_; ++i) attention_and_gate(b, mbs[static_cast<std::size_t>(i)], l, stats, i);
    double t0 = now();
    for (int i = 0; i < micro_batches_; ++i) {
      const MicroBatch& mb = mbs[static_cast<std::size_t>(i)];
      moe_.finish(i, tmp + mb.tok0 * d);
      add_inplace(h + mb.tok0 * d, tmp + mb.tok0 * d, (mb.tok1 - mb.tok0) * d);
      if (shared && c.shared_expert_gated)  // the gate reads the expert's input, still in xn
        add_sigmoid_gated(h + mb.tok0 * d, sh + mb.tok0 * d, xn_.as<float>() + mb.tok0 * d,
                          w_.layers[static_cast<std::size_t>(l)].shared_expert_gate.data(), mb.tok1 - mb.tok0, d);
      else if (shared)  // DeepSeek: the shared experts' output added as it is
        add_inplace(h + mb.tok0 * d, sh + mb.tok0 * d, (mb.tok1 - mb.tok0) * d);
    }
    times_.moe += now() - t0;
  }
  double t4 = now();
  const int64_t n = b.logit_rows();
  float* rows = fbuf(xn_, n * d);
  int64_t i = 0;
  for (const SeqChunk& ch : b.chunks) {
    const int64_t scored = ch.score_end - ch.score_begin;
    if (scored > 0) rms_norm(h + (ch.first + ch.score_begin) * d, scored, d, w_.final_norm.data(), eps, rows + d * i);
    i += scored;
    if (ch.emit) rms_norm(h + (ch.first + ch.count - 1) * d, 1, d, w_.final_norm.data(), eps, rows + d * i++);
  }
  logits.resize(static_cast<std::size_t>(n * c.vocab_size));
  if (n > 0) mm_.linear(rows, n, w_.lm_head, logits.data());
  times_.head += now() - t4;
}

}  // namespace moerun::runtime

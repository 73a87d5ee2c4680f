// Router-rank forward step.
#include "runtime/model_forward.hpp"

#include <array>
#include <chrono>
#include <cmath>

#include "base/error.hpp"
#include "base/parallel_for.hpp"
#include "io/dense_quant_cache.hpp"
#include "io/model_location.hpp"
#include "runtime/dense_ops.hpp"
#include "runtime/nonfinite_rows.hpp"

namespace moerun::runtime {
namespace {
double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
float* fbuf(AlignedBuffer& b, int64_t n) {
  b.resize(static_cast<std::size_t>(n) * sizeof(float));
  return b.as<float>();
}
}  // namespace

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

ModelForward::ModelForward(io::DenseWeights& weights, Matmul& mm, MoeLayer& moe, const router::RouterConfig& router, int micro_batches,
                           MlaMode mla_mode)
    : w_(weights), mm_(mm), moe_(moe), router_(router), micro_batches_(micro_batches) {
  const model::ModelConfig& c = weights.config;
  pack_for_decode(mm, {&weights.lm_head});
  mixers_ = make_mixer_blocks(weights, mm, mla_mode);
  // Top-k of the logits then a softmax over the chosen (gpt-oss) is softmax, top-k, renormalise:
  // exp(l_e) / sum over the chosen of exp(l_j) either way.
  router_.renormalize = c.norm_topk_prob || c.router_scoring == model::RouterScoring::TopKSoftmax;
  router_.sigmoid = c.router_scoring == model::RouterScoring::Sigmoid;
  router_.groups = c.router_groups;
  router_.topk_groups = c.router_topk_groups;
  router_.group_top2 = c.router_group_score == model::GroupScore::Top2Sum;
  router_.routed_scaling = static_cast<float>(c.routed_scaling_factor);
  mlp_ = make_mlp_blocks(weights, mm, moe, router_, shared_scratch_);
  // A schema row that no block takes would be read, counted and never used.
  for (std::size_t l = 0; l < weights.layers.size(); ++l)
    if (!weights.layers[l].all_taken()) fail(ErrorKind::Internal, "ModelForward: layer ", l, " has tensors that no block takes");
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

// A token whose logits row is not finite though its hidden state was: the LM head overflowed. One
// more pass over the logits (as sampling's argmax is): rows split over the threads when there are
// several (each row is its own token).
void ModelForward::flag_logit_rows(const StepBatch& b, const float* logits) {
  const int64_t V = w_.config.vocab_size;
  const auto head = static_cast<int32_t>(w_.config.num_layers);
  std::vector<int64_t>& token_of = logit_tokens_;
  token_of.clear();
  for (const SeqChunk& ch : b.chunks) {
    for (int64_t j = ch.score_begin; j < ch.score_end; ++j) token_of.push_back(ch.first + j);
    if (ch.emit) token_of.push_back(ch.first + ch.count - 1);
  }
  const auto n = static_cast<int64_t>(token_of.size());
  parallel_for(n, true, [&](int64_t r) {
    flag_nonfinite_rows(logits + r * V, 1, V, head, &nonfinite_layer_[static_cast<std::size_t>(token_of[static_cast<std::size_t>(r)])]);
  });
}

void ModelForward::forward(const StepBatch& b, std::vector<float>& logits, RoutingStats* stats, int micro_batches) {
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
  embed_tokens(w_.embed_tokens, b.ids.data(), T, h);
  const std::vector<MicroBatch> mbs = split_micro_batches(b, micro_batches > 0 ? micro_batches : micro_batches_);
  nonfinite_layer_.assign(static_cast<std::size_t>(T), -1);
  const StepBuffers buffers{h, xn_.as<float>(), q_.as<float>(), k_.as<float>(), v_.as<float>(), attn_.as<float>(), tmp, mix_.as<float>(),
                            T};
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (l > 0) flag_nonfinite_rows(h, T, d, static_cast<int32_t>(l - 1), nonfinite_layer_.data());
    const LayerStep step{b, mbs, buffers, sh, *mixers_.of_layer[static_cast<std::size_t>(l)], stats};
    mlp_.of_layer[static_cast<std::size_t>(l)]->run_layer(step, l, times_);
  }
  flag_nonfinite_rows(h, T, d, static_cast<int32_t>(c.num_layers - 1), nonfinite_layer_.data());
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
  flag_logit_rows(b, logits.data());
  times_.head += now() - t4;
}

}  // namespace moerun::runtime

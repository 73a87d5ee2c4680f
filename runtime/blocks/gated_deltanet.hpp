// Gated DeltaNet's token mixer (Qwen3-Next, Qwen3.5; transformers' modeling_qwen3_next, its torch
// path): a causal depthwise conv over the q/k/v channels with a state of the last inputs, then the
// gated delta rule over a recurrent state S [v_heads, k_dim, v_dim] per sequence, then an RMSNorm
// of each head's output gated by SiLU(z). Decode and prefill take one recurrent step a token (the
// same bits however a prompt is split); the chunked form (the WY/UT transform per chunk of 64)
// equals it to 1e-5.
#pragma once
#include <cstdint>
#include <vector>

#include "model/model_config.hpp"

namespace moerun::runtime {

// The layer's shape, as model.h5 gives it (model::LinearAttentionShape).
using DeltaNetShape = model::LinearAttentionShape;

// One sequence's state of one layer: the conv's last conv_kernel - 1 inputs [K-1, channels] (oldest
// first) and S. Zero for a new sequence.
struct DeltaNetState {
  std::vector<float> conv, recurrent;
  void reset(const DeltaNetShape& s);
};

// x [n, channels] in place: x_t <- SiLU(sum_j w[c, j] * x_{t-K+1+j}), the inputs before x_0 from
// `state` [K-1, channels], which then holds the last K-1 inputs. w: [channels, K].
void causal_conv1d_silu(float* x, int64_t n, int64_t channels, const float* w, int64_t K, float* state);

// Recurrent: token by token (AVX-512 where the CPU has it); RecurrentPortable: the same steps
// without AVX-512, as other CPUs run them (tests and benches); Chunked: the WY/UT form.
enum class DeltaRuleForm { Recurrent, RecurrentPortable, Chunked };

// The gated delta rule over n tokens of one sequence, each head on its own, in float32. q, k:
// [n, k_heads * k_dim] (after the conv; l2-normalised here, q scaled by 1/sqrt(k_dim)); v: [n,
// v_heads * v_dim]; g: [n, v_heads] log-decays (<= 0); beta: [n, v_heads] in (0, 1); state: S
// [v_heads, k_dim, v_dim], updated; out: [n, v_heads * v_dim]. Per token and head:
// S <- exp(g) S; S <- S + k (beta (v - S^T k))^T; o = S^T q.
void gated_delta_rule(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t n, const DeltaNetShape& s,
                      float* state, float* out, DeltaRuleForm form);

// The decay and the write strength from the projections a, b [n, v_heads]: g = -exp(A_log) *
// softplus(a + dt_bias), beta = sigmoid(b).
void delta_gates(const float* a, const float* b, int64_t n, int64_t v_heads, const float* A_log, const float* dt_bias, float* g,
                 float* beta);

// o [n, heads * dim] in place: RMSNorm over each head's dim (weight w [dim]), times SiLU(z).
void gated_rms_norm(float* o, const float* z, int64_t n, int64_t heads, int64_t dim, const float* w, float eps);

}  // namespace moerun::runtime

// Gated DeltaNet's kernels against float64 references written here from transformers'
// modeling_qwen3_next (torch_recurrent_gated_delta_rule, torch_causal_conv1d_update,
// Qwen3NextRMSNormGated): the recurrence, the chunked form (equal to it to 1e-5 relative, across
// chunk edges, from a nonzero state, with value heads sharing key heads), the conv with its state
// carried across calls, the gates and the gated norm.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/blocks/gated_deltanet.hpp"

namespace moerun::runtime {
namespace {

std::vector<float> randn(std::mt19937& rng, std::size_t n, float sd = 1.0f, float mean = 0.0f) {
  std::normal_distribution<float> d(mean, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0, e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    m = std::max(m, std::fabs(b[i]));
    e = std::max(e, std::fabs(a[i] - b[i]));
  }
  return e / m;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_err(a, std::vector<double>(b.begin(), b.end()));
}

// torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel, in float64; heads repeated as
// repeat_interleave does (value head h reads key head h / ratio).
void reference_rule(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& g,
                    const std::vector<float>& beta, int64_t n, const DeltaNetShape& s, std::vector<double>& S, std::vector<double>& out) {
  const int64_t Hk = s.k_heads, Hv = s.v_heads, dk = s.k_dim, dv = s.v_dim, ratio = Hv / Hk;
  out.assign(static_cast<std::size_t>(n * Hv * dv), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = h / ratio;
      std::vector<double> qt(dk), kt(dk);
      double qs = 0, kss = 0;
      for (int64_t i = 0; i < dk; ++i) {
        qt[i] = q[t * Hk * dk + kh * dk + i];
        kt[i] = k[t * Hk * dk + kh * dk + i];
        qs += qt[i] * qt[i];
        kss += kt[i] * kt[i];
      }
      for (int64_t i = 0; i < dk; ++i) {
        qt[i] = qt[i] / std::sqrt(qs + 1e-6) / std::sqrt(static_cast<double>(dk));
        kt[i] /= std::sqrt(kss + 1e-6);
      }
      double* Sh = S.data() + h * dk * dv;
      const double decay = std::exp(static_cast<double>(g[t * Hv + h])), b = beta[t * Hv + h];
      for (int64_t x = 0; x < dk * dv; ++x) Sh[x] *= decay;
      for (int64_t j = 0; j < dv; ++j) {
        double mem = 0;
        for (int64_t i = 0; i < dk; ++i) mem += Sh[i * dv + j] * kt[i];
        const double delta = (v[t * Hv * dv + h * dv + j] - mem) * b;
        for (int64_t i = 0; i < dk; ++i) Sh[i * dv + j] += kt[i] * delta;
      }
      for (int64_t j = 0; j < dv; ++j) {
        double o = 0;
        for (int64_t i = 0; i < dk; ++i) o += Sh[i * dv + j] * qt[i];
        out[static_cast<std::size_t>(t * Hv * dv + h * dv + j)] = o;
      }
    }
}

struct Inputs {
  std::vector<float> q, k, v, g, beta, state;
};

Inputs make_inputs(std::mt19937& rng, int64_t n, const DeltaNetShape& s) {
  Inputs in;
  in.q = randn(rng, static_cast<std::size_t>(n * s.k_heads * s.k_dim));
  in.k = randn(rng, in.q.size());
  in.v = randn(rng, static_cast<std::size_t>(n * s.v_heads * s.v_dim));
  // Decays as the model makes them: g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b).
  const std::vector<float> a = randn(rng, static_cast<std::size_t>(n * s.v_heads)), b = randn(rng, a.size());
  std::vector<float> A_log(static_cast<std::size_t>(s.v_heads)), dt(A_log.size(), 1.0f);
  for (std::size_t h = 0; h < A_log.size(); ++h) A_log[h] = std::log(0.5f + static_cast<float>(h));
  in.g.resize(a.size());
  in.beta.resize(a.size());
  delta_gates(a.data(), b.data(), n, s.v_heads, A_log.data(), dt.data(), in.g.data(), in.beta.data());
  in.state = randn(rng, static_cast<std::size_t>(s.recurrent_floats()), 0.3f);
  return in;
}

const DeltaNetShape kShape{.k_heads = 2, .v_heads = 4, .k_dim = 16, .v_dim = 24, .conv_kernel = 4};

TEST(GatedDeltaNet, RecurrenceMatchesFloat64) {
  std::mt19937 rng(1);
  const int64_t n = 37;
  Inputs in = make_inputs(rng, n, kShape);
  std::vector<double> S(in.state.begin(), in.state.end()), want;
  reference_rule(in.q, in.k, in.v, in.g, in.beta, n, kShape, S, want);
  std::vector<float> out(want.size()), state = in.state;
  gated_delta_rule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, kShape, state.data(), out.data(),
                   DeltaRuleForm::Recurrent);
  EXPECT_LT(rel_err(out, want), 1e-5);
  EXPECT_LT(rel_err(state, S), 1e-5);
}

// Both recurrences (AVX-512 and portable) against float64 on shapes with a whole 32-column block
// and a part of one, key dims not a multiple of 4, prompts short (state in place) and long (the
// block copied out); and a prompt in one call gives the bits of the same tokens one at a time.
TEST(GatedDeltaNet, RecurrenceFormsMatchFloat64AndTheirOwnTokenSteps) {
  const DeltaNetShape wide{.k_heads = 1, .v_heads = 2, .k_dim = 18, .v_dim = 40, .conv_kernel = 4};
  for (const DeltaNetShape& s : {kShape, wide})
    for (int64_t n : {3, 37})
      for (DeltaRuleForm form : {DeltaRuleForm::Recurrent, DeltaRuleForm::RecurrentPortable}) {
        std::mt19937 rng(static_cast<unsigned>(n + s.v_dim));
        Inputs in = make_inputs(rng, n, s);
        std::vector<double> S(in.state.begin(), in.state.end()), want;
        reference_rule(in.q, in.k, in.v, in.g, in.beta, n, s, S, want);
        std::vector<float> out(want.size()), state = in.state, steps(want.size()), state2 = in.state;
        gated_delta_rule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, s, state.data(), out.data(), form);
        const std::string what =
            "v_dim " + std::to_string(s.v_dim) + ", n " + std::to_string(n) + ", form " + std::to_string(static_cast<int>(form));
        EXPECT_LT(rel_err(out, want), 1e-5) << what;
        EXPECT_LT(rel_err(state, S), 1e-5) << what;
        const int64_t ks = s.k_heads * s.k_dim, vs = s.v_heads * s.v_dim, H = s.v_heads;
        for (int64_t t = 0; t < n; ++t)
          gated_delta_rule(in.q.data() + t * ks, in.k.data() + t * ks, in.v.data() + t * vs, in.g.data() + t * H, in.beta.data() + t * H, 1,
                           s, state2.data(), steps.data() + t * vs, form);
        EXPECT_EQ(steps, out) << what;
        EXPECT_EQ(state2, state) << what;
      }
}

// The chunked form equals the recurrence (and float64) for lengths inside one chunk, at its edge,
// and across several, from a nonzero state.
TEST(GatedDeltaNet, ChunkedEqualsRecurrence) {
  for (int64_t n : {1, 7, 64, 65, 150}) {
    std::mt19937 rng(static_cast<unsigned>(n));
    Inputs in = make_inputs(rng, n, kShape);
    std::vector<float> rec(static_cast<std::size_t>(n * kShape.v_heads * kShape.v_dim)), chk(rec.size());
    std::vector<float> s1 = in.state, s2 = in.state;
    gated_delta_rule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, kShape, s1.data(), rec.data(),
                     DeltaRuleForm::Recurrent);
    gated_delta_rule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, kShape, s2.data(), chk.data(),
                     DeltaRuleForm::Chunked);
    EXPECT_LT(rel_err(chk, rec), 1e-5) << "n = " << n;
    EXPECT_LT(rel_err(s2, s1), 1e-5) << "n = " << n;
    std::vector<double> S(in.state.begin(), in.state.end()), want;
    reference_rule(in.q, in.k, in.v, in.g, in.beta, n, kShape, S, want);
    EXPECT_LT(rel_err(chk, want), 1e-5) << "n = " << n;
    EXPECT_GT(max_abs(chk), 0.01);
  }
}

// A prompt prefilled in two calls (the state carried) and then decoded token by token gives what
// one pass over everything gives: the state is all a sequence needs.
TEST(GatedDeltaNet, StateCarriesAcrossCalls) {
  std::mt19937 rng(3);
  const int64_t n = 100, split = 70;
  Inputs in = make_inputs(rng, n, kShape);
  const int64_t ks = kShape.k_heads * kShape.k_dim, vs = kShape.v_heads * kShape.v_dim, H = kShape.v_heads;
  std::vector<float> whole(static_cast<std::size_t>(n * vs)), parts(whole.size()), s1 = in.state, s2 = in.state;
  gated_delta_rule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, kShape, s1.data(), whole.data(),
                   DeltaRuleForm::Chunked);
  gated_delta_rule(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), split, kShape, s2.data(), parts.data(),
                   DeltaRuleForm::Chunked);
  for (int64_t t = split; t < n; ++t)
    gated_delta_rule(in.q.data() + t * ks, in.k.data() + t * ks, in.v.data() + t * vs, in.g.data() + t * H, in.beta.data() + t * H, 1,
                     kShape, s2.data(), parts.data() + t * vs, DeltaRuleForm::Recurrent);
  EXPECT_LT(rel_err(parts, whole), 1e-5);
  EXPECT_LT(rel_err(s2, s1), 1e-5);
}

// torch_causal_conv1d_update / F.conv1d with padding K-1 in float64: over the whole input at once,
// and in three calls with the state carried, against zero history for a new sequence.
TEST(GatedDeltaNet, CausalConvWithState) {
  std::mt19937 rng(4);
  const int64_t n = 11, C = 5, K = 4;
  const std::vector<float> x = randn(rng, static_cast<std::size_t>(n * C)), w = randn(rng, static_cast<std::size_t>(C * K));
  std::vector<double> want(x.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = t - K + 1 + j;
        if (src >= 0) s += static_cast<double>(w[c * K + j]) * x[src * C + c];
      }
      want[static_cast<std::size_t>(t * C + c)] = s / (1 + std::exp(-s));
    }
  std::vector<float> once = x, state(static_cast<std::size_t>((K - 1) * C), 0.0f);
  causal_conv1d_silu(once.data(), n, C, w.data(), K, state.data());
  EXPECT_LT(rel_err(once, want), 1e-6);
  std::vector<float> pieces = x, st(state.size(), 0.0f);
  causal_conv1d_silu(pieces.data(), 2, C, w.data(), K, st.data());
  causal_conv1d_silu(pieces.data() + 2 * C, 1, C, w.data(), K, st.data());
  causal_conv1d_silu(pieces.data() + 3 * C, n - 3, C, w.data(), K, st.data());
  EXPECT_EQ(pieces, once);
  EXPECT_EQ(st, state);
  for (int64_t i = 0; i < (K - 1) * C; ++i) EXPECT_EQ(state[i], x[(n - K + 1) * C + i]);  // the last K-1 inputs
}

// Qwen3NextRMSNormGated and the gates, in float64.
TEST(GatedDeltaNet, GatedNormAndGates) {
  std::mt19937 rng(5);
  const int64_t n = 3, H = 2, D = 8;
  std::vector<float> o = randn(rng, static_cast<std::size_t>(n * H * D)), z = randn(rng, o.size()), w = randn(rng, D, 0.1f, 1.0f);
  std::vector<double> want(o.size());
  for (int64_t r = 0; r < n * H; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(o[r * D + i]) * o[r * D + i];
    const double inv = 1 / std::sqrt(ss / D + 1e-6);
    for (int64_t i = 0; i < D; ++i) {
      const double zi = z[r * D + i];
      want[static_cast<std::size_t>(r * D + i)] = o[r * D + i] * inv * w[i] * zi / (1 + std::exp(-zi));
    }
  }
  gated_rms_norm(o.data(), z.data(), n, H, D, w.data(), 1e-6f);
  EXPECT_LT(rel_err(o, want), 1e-6);
  const float a[] = {0.3f, 30.0f}, b[] = {-1.0f, 2.0f}, A_log[] = {0.5f, -1.0f}, dt[] = {1.0f, 0.5f};
  float g[2], beta[2];
  delta_gates(a, b, 1, 2, A_log, dt, g, beta);
  EXPECT_NEAR(g[0], -std::exp(0.5) * std::log1p(std::exp(1.3)), 1e-6);
  EXPECT_NEAR(g[1], -std::exp(-1.0) * 30.5, 1e-5);  // softplus(x) = x past 20, as torch's
  EXPECT_NEAR(beta[0], 1 / (1 + std::exp(1.0)), 1e-7);
  EXPECT_NEAR(beta[1], 1 / (1 + std::exp(-2.0)), 1e-7);
}

}  // namespace
}  // namespace moerun::runtime

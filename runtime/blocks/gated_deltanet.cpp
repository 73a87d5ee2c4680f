// Gated DeltaNet: conv, gates, the delta rule (recurrent and chunked), the gated norm.
#include "runtime/blocks/gated_deltanet.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include <immintrin.h>

#include "base/cpu_features.hpp"
#include "base/error.hpp"
#include "runtime/dense_ops.hpp"

namespace moerun::runtime {
namespace {

constexpr int64_t kChunk = 64;  // transformers' and fla's chunk size

// The hot loops run over a head's value dim; built for AVX-512 and AVX2 besides the baseline and
// chosen at load by the CPU (the project's baseline is plain x86-64).
#define MOERUN_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

float silu(float x) {
  return x / (1.0f + std::exp(-x));
}

// x / sqrt(sum x^2 + 1e-6), times `scale` (fla's l2norm, as transformers' torch path).
void l2_normalise(const float* x, int64_t d, float scale, float* y) {
  float ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += x[i] * x[i];
  const float r = scale / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] * r;
}

// One head over n tokens, token by token. q, k: rows of stride ks (the head's first value); v, o:
// stride vs; g, beta: stride gs. S [dk, dv].
//
// Column j of S is read, written and output by column j alone (its sum over k, its write, its
// read by q), so a block of kCols columns runs through all n tokens while it stays in L1 (16 KiB
// of a 128-row state), and within a token the block's sums over S's rows go into kParts partial
// sums, 8 independent chains of vectors instead of 2. The decay multiplies the read's sum once
// instead of every element before it, so the read pass writes nothing. (`moerun bench deltanet
// --prompt 128`, the AVX-512 form, 2 threads: the mixer 13.2 -> 9.5 ms.) Every path (prompt,
// decode, any batch) runs this, so a column's bits depend on neither the block nor the token count.
constexpr int64_t kCols = 32, kParts = 4, kCopyTokens = 8;

template <int64_t W>
__attribute__((always_inline)) inline void recurrent_columns(const float* q, const float* k, const float* v, const float* decays,
                                                             const float* beta, int64_t n, int64_t dk, int64_t dv, int64_t ks, int64_t vs,
                                                             int64_t gs, float* S, float* o, int64_t w) {
  const int64_t cols = W > 0 ? W : w;
  const int64_t whole = dk - dk % kParts;
  for (int64_t t = 0; t < n; ++t) {
    const float* kt = k + t * ks;
    const float* qt = q + t * ks;
    const float decay = decays[t], b = beta[t * gs];
    float part[kParts][kCols] = {}, delta[kCols];
    for (int64_t i = 0; i < whole; i += kParts)
      for (int64_t u = 0; u < kParts; ++u) {
        const float* row = S + (i + u) * dv;
        for (int64_t x = 0; x < cols; ++x) part[u][x] += row[x] * kt[i + u];
      }
    for (int64_t i = whole; i < dk; ++i)
      for (int64_t x = 0; x < cols; ++x) part[0][x] += S[i * dv + x] * kt[i];
    const float* vt = v + t * vs;
    for (int64_t x = 0; x < cols; ++x) delta[x] = (vt[x] - decay * ((part[0][x] + part[1][x]) + (part[2][x] + part[3][x]))) * b;
    float out[kParts][kCols] = {};
    for (int64_t i = 0; i < whole; i += kParts)
      for (int64_t u = 0; u < kParts; ++u) {
        float* row = S + (i + u) * dv;
        for (int64_t x = 0; x < cols; ++x) {
          const float s = row[x] * decay + kt[i + u] * delta[x];
          row[x] = s;
          out[u][x] += s * qt[i + u];
        }
      }
    for (int64_t i = whole; i < dk; ++i)
      for (int64_t x = 0; x < cols; ++x) {
        const float s = S[i * dv + x] * decay + kt[i] * delta[x];
        S[i * dv + x] = s;
        out[0][x] += s * qt[i];
      }
    float* ot = o + t * vs;
    for (int64_t x = 0; x < cols; ++x) ot[x] = (out[0][x] + out[1][x]) + (out[2][x] + out[3][x]);
  }
}

// The same sums in the same order with AVX-512 registers held across S's rows: w <= 32 columns
// (kFull: 32), the lanes past w masked off; S's rows `ss` floats apart. (GCC keeps the generic
// form's partial sums on the stack and checks S against q and k for overlap at every row.)
template <bool kFull>
__attribute__((target("avx512f"))) void recurrent_columns_avx512(const float* q, const float* k, const float* v, const float* decays,
                                                                 const float* beta, int64_t n, int64_t dk, int64_t ss, int64_t ks,
                                                                 int64_t vs, int64_t gs, float* S, float* o, int64_t w) {
  const auto lanes = [](int64_t c) { return static_cast<__mmask16>(c >= 16 ? 0xFFFF : c <= 0 ? 0 : (1u << c) - 1); };
  const __mmask16 lo = lanes(w), hi = lanes(w - 16);
  const auto load = [&](const float* p, __mmask16 m) __attribute__((target("avx512f"), always_inline)) {
    if constexpr (kFull)
      return _mm512_loadu_ps(p);
    else
      return _mm512_maskz_loadu_ps(m, p);
  };
  const auto store = [&](float* p, __mmask16 m, __m512 x) __attribute__((target("avx512f"), always_inline)) {
    if constexpr (kFull)
      _mm512_storeu_ps(p, x);
    else
      _mm512_mask_storeu_ps(p, m, x);
  };
  const int64_t whole = dk - dk % kParts;
  for (int64_t t = 0; t < n; ++t) {
    const float* kt = k + t * ks;
    const float* qt = q + t * ks;
    const __m512 decay = _mm512_set1_ps(decays[t]), b = _mm512_set1_ps(beta[t * gs]);
    __m512 a[kParts][2];
    for (auto& p : a) p[0] = p[1] = _mm512_setzero_ps();
    const auto read = [&](int64_t i, __m512 * p) __attribute__((target("avx512f"), always_inline)) {
      const __m512 ki = _mm512_set1_ps(kt[i]);
      p[0] = _mm512_fmadd_ps(load(S + i * ss, lo), ki, p[0]);
      p[1] = _mm512_fmadd_ps(load(S + i * ss + 16, hi), ki, p[1]);
    };
    for (int64_t i = 0; i < whole; i += kParts) {  // unrolled by hand: a runtime index puts a[] on the stack
      read(i, a[0]);
      read(i + 1, a[1]);
      read(i + 2, a[2]);
      read(i + 3, a[3]);
    }
    for (int64_t i = whole; i < dk; ++i) read(i, a[0]);
    __m512 delta[2];
    for (int h = 0; h < 2; ++h) {
      const __m512 sum = _mm512_add_ps(_mm512_add_ps(a[0][h], a[1][h]), _mm512_add_ps(a[2][h], a[3][h]));
      const __m512 vt = load(v + t * vs + 16 * h, h ? hi : lo);
      delta[h] = _mm512_mul_ps(_mm512_sub_ps(vt, _mm512_mul_ps(decay, sum)), b);
    }
    for (auto& p : a) p[0] = p[1] = _mm512_setzero_ps();
    const auto write = [&](int64_t i, __m512 * p) __attribute__((target("avx512f"), always_inline)) {
      const __m512 ki = _mm512_set1_ps(kt[i]), qi = _mm512_set1_ps(qt[i]);
      float* row = S + i * ss;
      const __m512 s0 = _mm512_fmadd_ps(ki, delta[0], _mm512_mul_ps(load(row, lo), decay));
      const __m512 s1 = _mm512_fmadd_ps(ki, delta[1], _mm512_mul_ps(load(row + 16, hi), decay));
      store(row, lo, s0);
      store(row + 16, hi, s1);
      p[0] = _mm512_fmadd_ps(s0, qi, p[0]);
      p[1] = _mm512_fmadd_ps(s1, qi, p[1]);
    };
    for (int64_t i = 0; i < whole; i += kParts) {
      write(i, a[0]);
      write(i + 1, a[1]);
      write(i + 2, a[2]);
      write(i + 3, a[3]);
    }
    for (int64_t i = whole; i < dk; ++i) write(i, a[0]);
    for (int h = 0; h < 2; ++h)
      store(o + t * vs + 16 * h, h ? hi : lo, _mm512_add_ps(_mm512_add_ps(a[0][h], a[1][h]), _mm512_add_ps(a[2][h], a[3][h])));
  }
}

MOERUN_VECTOR_CLONES void recurrent_head_generic(const float* q, const float* k, const float* v, const float* decays, const float* beta,
                                                 int64_t n, int64_t dk, int64_t dv, int64_t ks, int64_t vs, int64_t gs, float* S,
                                                 float* o) {
  int64_t x0 = 0;
  for (; x0 + kCols <= dv; x0 += kCols) recurrent_columns<kCols>(q, k, v + x0, decays, beta, n, dk, dv, ks, vs, gs, S + x0, o + x0, kCols);
  if (x0 < dv) recurrent_columns<0>(q, k, v + x0, decays, beta, n, dk, dv, ks, vs, gs, S + x0, o + x0, dv - x0);
}

void recurrent_head(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t n, int64_t dk, int64_t dv,
                    int64_t ks, int64_t vs, int64_t gs, float* S, float* o, bool portable) {
  // The thread's scratch, kept across calls: decode calls this once per head, sequence and layer.
  thread_local std::vector<float> decay, block;
  decay.resize(static_cast<std::size_t>(n));
  for (int64_t t = 0; t < n; ++t) decay[static_cast<std::size_t>(t)] = std::exp(g[t * gs]);
  if (portable || !cpu_features().avx512f) return recurrent_head_generic(q, k, v, decay.data(), beta, n, dk, dv, ks, vs, gs, S, o);
  // Over several tokens a block is copied out to rows of its own width: in place, its rows 512
  // bytes apart (dv 128) fall into 16 of L1's 64 sets and do not stay there.
  const bool copy = n >= kCopyTokens;
  if (copy) block.resize(static_cast<std::size_t>(dk * kCols));
  for (int64_t x0 = 0; x0 < dv; x0 += kCols) {
    const int64_t w = std::min(kCols, dv - x0);
    float* Sb = copy ? block.data() : S + x0;
    const int64_t ss = copy ? kCols : dv;
    if (copy)
      for (int64_t i = 0; i < dk; ++i) std::copy(S + i * dv + x0, S + i * dv + x0 + w, Sb + i * kCols);
    if (w == kCols)
      recurrent_columns_avx512<true>(q, k, v + x0, decay.data(), beta, n, dk, ss, ks, vs, gs, Sb, o + x0, w);
    else
      recurrent_columns_avx512<false>(q, k, v + x0, decay.data(), beta, n, dk, ss, ks, vs, gs, Sb, o + x0, w);
    if (copy)
      for (int64_t i = 0; i < dk; ++i) std::copy(Sb + i * kCols, Sb + i * kCols + w, S + i * dv + x0);
  }
}

// out[0, w) <- out * scale + sum_j coef[j] * rows[j * stride + (0, w)], for w <= 64 held in
// registers across the sum (a row of the result is loaded and stored once, not once a term).
__attribute__((always_inline)) inline void accumulate_rows(float* out, float scale, const float* coef, const float* rows, int64_t stride,
                                                           int64_t count, int64_t w) {
  constexpr int64_t kBlock = 64;
  float acc[kBlock];
  if (w == kBlock) {
    for (int64_t x = 0; x < kBlock; ++x) acc[x] = out[x] * scale;
    for (int64_t j = 0; j < count; ++j) {
      const float c = coef[j];
      const float* r = rows + j * stride;
      for (int64_t x = 0; x < kBlock; ++x) acc[x] += c * r[x];
    }
    for (int64_t x = 0; x < kBlock; ++x) out[x] = acc[x];
    return;
  }
  for (int64_t x = 0; x < w; ++x) acc[x] = out[x] * scale;
  for (int64_t j = 0; j < count; ++j)
    for (int64_t x = 0; x < w; ++x) acc[x] += coef[j] * rows[j * stride + x];
  for (int64_t x = 0; x < w; ++x) out[x] = acc[x];
}

// out [dim] <- out * scale + sum_j coef[j] * rows[j], in blocks of 64 columns.
__attribute__((always_inline)) inline void accumulate(float* out, float scale, const float* coef, const float* rows, int64_t stride,
                                                      int64_t count, int64_t dim) {
  for (int64_t x0 = 0; x0 < dim; x0 += 64)
    accumulate_rows(out + x0, scale, coef, rows + x0, stride, count, std::min<int64_t>(64, dim - x0));
}

// One chunk of c <= kChunk tokens of one head (transformers' torch_chunk_gated_delta_rule): the
// chunk's writes are solved for at once (a unit lower-triangular system, by forward substitution),
// then the state enters through two [c, dk] x [dk, dv] products and leaves through one.
struct ChunkScratch {
  std::vector<float> G, eG, eLast, D, A, kT, KK, QK, vv, kcd, vnew, col;
  void size(int64_t dk, int64_t dv) {
    for (auto* v : {&G, &eG, &eLast, &col}) v->resize(static_cast<std::size_t>(std::max<int64_t>(kChunk, dk)));
    for (auto* v : {&D, &A, &KK, &QK}) v->resize(kChunk * kChunk);
    kT.resize(static_cast<std::size_t>(dk * kChunk));
    vv.resize(static_cast<std::size_t>(kChunk * dv));
    kcd.resize(static_cast<std::size_t>(kChunk * dk));
    vnew.resize(static_cast<std::size_t>(kChunk * dv));
  }
};

MOERUN_VECTOR_CLONES void chunk_head(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t c,
                                     int64_t dk, int64_t dv, int64_t ks, int64_t vs, int64_t gs, float* S, float* o, ChunkScratch& w) {
  float* G = w.G.data();
  float acc = 0;
  for (int64_t i = 0; i < c; ++i) G[i] = acc += g[i * gs];
  float* eG = w.eG.data();
  float* eLast = w.eLast.data();
  float* D = w.D.data();  // exp(G_i - G_j) for j <= i
  for (int64_t i = 0; i < c; ++i) {
    eG[i] = std::exp(G[i]);
    eLast[i] = std::exp(G[c - 1] - G[i]);
    for (int64_t j = 0; j <= i; ++j) D[i * kChunk + j] = std::exp(G[i] - G[j]);
  }
  // K K^T and Q K^T of the chunk, over k transposed (the sums run along a contiguous row).
  float* kT = w.kT.data();
  for (int64_t j = 0; j < c; ++j)
    for (int64_t r = 0; r < dk; ++r) kT[r * kChunk + j] = k[j * ks + r];
  for (int64_t i = 0; i < c; ++i) {
    std::fill(w.KK.begin() + i * kChunk, w.KK.begin() + i * kChunk + c, 0.0f);
    std::fill(w.QK.begin() + i * kChunk, w.QK.begin() + i * kChunk + c, 0.0f);
    accumulate(w.KK.data() + i * kChunk, 1.0f, k + i * ks, kT, kChunk, dk, c);
    accumulate(w.QK.data() + i * kChunk, 1.0f, q + i * ks, kT, kChunk, dk, c);
  }
  // A = -(beta_i k_i . k_j) exp(G_i - G_j) below the diagonal; then (I - A)^-1 by substitution
  // (each row from the rows above it, as transformers' loop), plus the identity.
  float* A = w.A.data();
  for (int64_t i = 0; i < c; ++i)
    for (int64_t j = 0; j < c; ++j) A[i * kChunk + j] = j < i ? -beta[i * gs] * w.KK[i * kChunk + j] * D[i * kChunk + j] : 0.0f;
  for (int64_t i = 1; i < c; ++i) {
    float* row = A + i * kChunk;
    float old[kChunk];
    std::copy(row, row + i, old);
    for (int64_t j = 0; j < i; ++j) {
      float s = old[j];
      for (int64_t m = j + 1; m < i; ++m) s += old[m] * A[m * kChunk + j];
      row[j] = s;
    }
  }
  for (int64_t i = 0; i < c; ++i) A[i * kChunk + i] = 1.0f;
  // vv = A (beta v); kcd = A (beta exp(G) k): row i sums rows j <= i.
  float* col = w.col.data();
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t j = 0; j <= i; ++j) col[j] = A[i * kChunk + j] * beta[j * gs];
    std::fill(w.vv.begin() + i * dv, w.vv.begin() + (i + 1) * dv, 0.0f);
    accumulate(w.vv.data() + i * dv, 1.0f, col, v, vs, i + 1, dv);
    for (int64_t j = 0; j <= i; ++j) col[j] *= eG[j];
    std::fill(w.kcd.begin() + i * dk, w.kcd.begin() + (i + 1) * dk, 0.0f);
    accumulate(w.kcd.data() + i * dk, 1.0f, col, k, ks, i + 1, dk);
  }
  // v_new = vv - kcd S; o = exp(G) q S + sum_{j <= i} (q_i . k_j) exp(G_i - G_j) v_new_j.
  for (int64_t i = 0; i < c; ++i) {
    float* vn = w.vnew.data() + i * dv;
    std::copy(w.vv.data() + i * dv, w.vv.data() + (i + 1) * dv, vn);
    for (int64_t r = 0; r < dk; ++r) col[r] = -w.kcd[i * dk + r];
    accumulate(vn, 1.0f, col, S, dv, dk, dv);
  }
  for (int64_t i = 0; i < c; ++i) {
    float* oi = o + i * vs;
    for (int64_t r = 0; r < dk; ++r) col[r] = q[i * ks + r] * eG[i];
    std::fill(oi, oi + dv, 0.0f);
    accumulate(oi, 1.0f, col, S, dv, dk, dv);
    for (int64_t j = 0; j <= i; ++j) col[j] = w.QK[i * kChunk + j] * D[i * kChunk + j];
    accumulate(oi, 1.0f, col, w.vnew.data(), dv, i + 1, dv);
  }
  // S <- exp(G_last) S + sum_j exp(G_last - G_j) k_j v_new_j^T.
  for (int64_t r = 0; r < dk; ++r) {
    for (int64_t j = 0; j < c; ++j) col[j] = kT[r * kChunk + j] * eLast[j];
    accumulate(S + r * dv, eG[c - 1], col, w.vnew.data(), dv, c, dv);
  }
}

}  // namespace

void DeltaNetState::reset(const DeltaNetShape& s) {
  conv.assign(static_cast<std::size_t>(s.conv_state_floats()), 0.0f);
  recurrent.assign(static_cast<std::size_t>(s.recurrent_floats()), 0.0f);
}

namespace {
// out[c] = SiLU(sum_j wT[j, c] in[j, c]) over a row of C channels (the taps' rows `stride` apart).
MOERUN_VECTOR_CLONES void conv_row(const float* in, int64_t stride, const float* wT, int64_t K, int64_t C, float* out) {
  for (int64_t c = 0; c < C; ++c) out[c] = 0.0f;
  for (int64_t j = 0; j < K; ++j) {
    const float* wj = wT + j * C;
    const float* r = in + j * stride;
    for (int64_t c = 0; c < C; ++c) out[c] += wj[c] * r[c];
  }
  for (int64_t c = 0; c < C; ++c) out[c] = silu(out[c]);
}
}  // namespace

void causal_conv1d_silu(float* x, int64_t n, int64_t C, const float* w, int64_t K, float* state) {
  // The window of inputs: the state's K-1 rows, then x's rows (read before they are overwritten);
  // the taps transposed so a row's sums run along the channels.
  const auto in = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>((K - 1 + n) * C));
  std::vector<float> wT(static_cast<std::size_t>(K * C));
  std::copy(state, state + (K - 1) * C, in.get());
#pragma omp parallel for schedule(static) if (n * C >= kParallelElements)
  for (int64_t t = 0; t < n; ++t) std::copy(x + t * C, x + (t + 1) * C, in.get() + (K - 1 + t) * C);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < K; ++j) wT[static_cast<std::size_t>(j * C + c)] = w[c * K + j];
      // Rows are independent (each reads its own window of `in`): a prompt's rows on every thread.
#pragma omp parallel for schedule(static) if (n * C >= kParallelElements)
  for (int64_t t = 0; t < n; ++t) conv_row(in.get() + t * C, C, wT.data(), K, C, x + t * C);
  std::copy(in.get() + n * C, in.get() + (K - 1 + n) * C, state);
}

void gated_delta_rule(const float* q, const float* k, const float* v, const float* g, const float* beta, int64_t n, const DeltaNetShape& s,
                      float* state, float* out, DeltaRuleForm form) {
  if (s.k_heads <= 0 || s.v_heads % s.k_heads != 0)
    fail(ErrorKind::Internal, "gated_delta_rule: ", s.v_heads, " value heads over ", s.k_heads, " key heads");
  const int64_t Hk = s.k_heads, Hv = s.v_heads, dk = s.k_dim, dv = s.v_dim, ks = Hk * dk, vs = Hv * dv;
  // l2-normalised q (times 1/sqrt(dk)) and k, once per key head.
  const auto qn = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(n * ks));
  const auto kn = std::make_unique_for_overwrite<float[]>(static_cast<std::size_t>(n * ks));
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
#pragma omp parallel for schedule(static) if (n * ks >= kParallelElements)
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < Hk; ++h) {
      l2_normalise(q + t * ks + h * dk, dk, scale, qn.get() + t * ks + h * dk);
      l2_normalise(k + t * ks + h * dk, dk, 1.0f, kn.get() + t * ks + h * dk);
    }
  const int64_t ratio = Hv / Hk;
#pragma omp parallel
  {
    ChunkScratch w;
    if (form == DeltaRuleForm::Chunked) w.size(dk, dv);
#pragma omp for schedule(static)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = h / ratio;
      float* S = state + h * dk * dv;
      const float* qh = qn.get() + kh * dk;
      const float* kh_ = kn.get() + kh * dk;
      if (form != DeltaRuleForm::Chunked) {
        recurrent_head(qh, kh_, v + h * dv, g + h, beta + h, n, dk, dv, ks, vs, Hv, S, out + h * dv,
                       form == DeltaRuleForm::RecurrentPortable);
        continue;
      }
      for (int64_t t0 = 0; t0 < n; t0 += kChunk) {
        const int64_t c = std::min(kChunk, n - t0);
        chunk_head(qh + t0 * ks, kh_ + t0 * ks, v + t0 * vs + h * dv, g + t0 * Hv + h, beta + t0 * Hv + h, c, dk, dv, ks, vs, Hv, S,
                   out + t0 * vs + h * dv, w);
      }
    }
  }
}

void delta_gates(const float* a, const float* b, int64_t n, int64_t H, const float* A_log, const float* dt_bias, float* g, float* beta) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const float x = a[t * H + h] + dt_bias[h];
      const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));  // torch's softplus threshold
      g[t * H + h] = -std::exp(A_log[h]) * softplus;
      beta[t * H + h] = 1.0f / (1.0f + std::exp(-b[t * H + h]));
    }
}

void gated_rms_norm(float* o, const float* z, int64_t n, int64_t heads, int64_t dim, const float* w, float eps) {
#pragma omp parallel for schedule(static) if (n * heads * dim >= kParallelElements)
  for (int64_t r = 0; r < n * heads; ++r) {
    float* x = o + r * dim;
    const float* zr = z + r * dim;
    float ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[i] * x[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) x[i] = x[i] * inv * w[i] * silu(zr[i]);
  }
}

}  // namespace moerun::runtime

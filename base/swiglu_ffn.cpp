// The SwiGLU FFN on the CPU: three GEMMs with the activation between them.
#include "base/swiglu_ffn.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/cpu_features.hpp"
#include "base/exp_avx512.hpp"
#include "base/native_matmul.hpp"

namespace moerun {

void pack_ffn(Matmul& mm, FfnWeights& w) {
  mm.pack(w.w1, kFfnTypicalRows);
  mm.pack(w.w3, kFfnTypicalRows);
  mm.pack(w.w2, kFfnTypicalRows);
}

namespace {
// One row of gated_activation with 16 lanes (the last masked) and exp_ps: the same expressions,
// without a libm call per element (`perf record` of 24 one-sequence prompts of the bench-peer
// qwen3_5_moe shape: about 2% of the time in expf called from here).
__attribute__((target("avx512f"))) void gated_row_avx512(const float* G, float* row, int64_t ff, const float* b1, const float* b3,
                                                         const FfnActivation& a) {
  const __m512 one = _mm512_set1_ps(1.0f), limit = _mm512_set1_ps(a.limit), alpha = _mm512_set1_ps(-a.alpha);
  for (int64_t i = 0; i < ff; i += 16) {
    const auto m = static_cast<__mmask16>(ff - i >= 16 ? 0xFFFF : (1u << (ff - i)) - 1);
    __m512 g = _mm512_maskz_loadu_ps(m, G + i), u = _mm512_maskz_loadu_ps(m, row + i);
    if (b1) {
      g = _mm512_add_ps(g, _mm512_maskz_loadu_ps(m, b1 + i));
      u = _mm512_add_ps(u, _mm512_maskz_loadu_ps(m, b3 + i));
    }
    __m512 r;
    if (a.clamped) {
      g = _mm512_min_ps(g, limit);
      u = _mm512_min_ps(_mm512_max_ps(u, _mm512_sub_ps(_mm512_setzero_ps(), limit)), limit);
      r = _mm512_mul_ps(_mm512_add_ps(u, one), _mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_mul_ps(alpha, g)))));
    } else {
      r = _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g)))), u);
    }
    _mm512_mask_storeu_ps(row + i, m, r);
  }
}

// act = activation(G + b1, U + b3) per element, stored in the weights' dtype. The result goes
// into U's row first (U is scratch), so bf16 output needs no buffer of its own. Every row count
// takes the same path on a CPU, so a row's bits do not depend on its batch.
void gated_activation(const float* G, float* U, const FfnWeights& w, int64_t rows, int64_t ff, const FfnActivation& a, DType dt,
                      void* act) {
  const bool biased = w.bias.size() > 0;
  const bool avx512 = cpu_features().avx512f;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = U + r * ff;
    if (avx512) {
      gated_row_avx512(G + r * ff, row, ff, biased ? w.b1() : nullptr, biased ? w.b3() : nullptr, a);
    } else {
      for (int64_t i = 0; i < ff; ++i) {
        float g = G[r * ff + i], u = row[i];
        if (biased) {
          g += w.b1()[i];
          u += w.b3()[i];
        }
        if (a.clamped) {
          g = std::min(g, a.limit);
          u = std::clamp(u, -a.limit, a.limit);
          row[i] = (u + 1.0f) * (g / (1.0f + std::exp(-a.alpha * g)));
        } else {
          row[i] = g / (1.0f + std::exp(-g)) * u;
        }
      }
    }
    if (dt == DType::BF16)
      f32_to_bf16(row, static_cast<uint16_t*>(act) + r * ff, static_cast<std::size_t>(ff));
    else
      std::memcpy(static_cast<float*>(act) + r * ff, row, static_cast<std::size_t>(ff) * sizeof(float));
  }
}
void add_b2(float* y, int64_t rows, int64_t d, const FfnWeights& w) {
  if (w.bias.size() == 0) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < d; ++i) y[r * d + i] += w.b2()[i];
}

void quantized_ffn_forward(const float* x, int64_t rows, const FfnWeights& w, float* y, FfnScratch& s, const FfnActivation& a) {
  const int64_t d = w.w2.rows, ff = w.w2.cols;
  for (AlignedBuffer* b : {&s.g, &s.u, &s.act}) b->resize(static_cast<std::size_t>(rows * ff) * 4);
  quantize_activations(x, rows, d, s.xq);
  quant_matmul(w.w1.scheme, s.xq, ff, w.w1.data.as<uint8_t>(), s.g.as<float>());
  quant_matmul(w.w3.scheme, s.xq, ff, w.w3.data.as<uint8_t>(), s.u.as<float>());
  gated_activation(s.g.as<float>(), s.u.as<float>(), w, rows, ff, a, DType::F32, s.act.data());
  quantize_activations(s.act.as<float>(), rows, ff, s.aq);
  quant_matmul(w.w2.scheme, s.aq, d, w.w2.data.as<uint8_t>(), y);
  add_b2(y, rows, d, w);
}
// mxfp4/fp8-block: float32 throughout, the activation's output straight into w2's input.
void native_ffn_forward(Matmul& mm, const float* x, int64_t rows, const FfnWeights& w, float* y, FfnScratch& s, const FfnActivation& a) {
  const int64_t d = w.w2.rows, ff = w.w2.cols;
  for (AlignedBuffer* b : {&s.g, &s.u, &s.act}) b->resize(static_cast<std::size_t>(rows * ff) * 4);
  mm.linear(x, rows, w.w1, s.g.as<float>());
  mm.linear(x, rows, w.w3, s.u.as<float>());
  gated_activation(s.g.as<float>(), s.u.as<float>(), w, rows, ff, a, DType::F32, s.act.data());
  mm.linear(s.act.as<float>(), rows, w.w2, y);
  add_b2(y, rows, d, w);
}
}  // namespace

void swiglu_ffn_forward(Matmul& mm, const float* x, int64_t rows, const FfnWeights& w, float* y, FfnScratch& s,
                        const FfnActivation& activation) {
  if (rows == 0) return;
  if (is_group_quantized(w.w2.scheme)) return quantized_ffn_forward(x, rows, w, y, s, activation);
  if (is_native_quantized(w.w2.scheme)) return native_ffn_forward(mm, x, rows, w, y, s, activation);
  const int64_t d = w.w2.rows, ff = w.w2.cols;
  const DType dt = w.w2.dtype;
  // Scratch is sized for the padded row count so bf16 GEMMs compute padding rows in place.
  const int64_t cap = Matmul::padded_rows(rows);
  const void* xin = x;
  if (dt == DType::BF16) {
    s.x.resize(static_cast<std::size_t>(cap * d) * 2);
    f32_to_bf16(x, s.x.as<uint16_t>(), static_cast<std::size_t>(rows * d));
    std::memset(s.x.as<uint16_t>() + rows * d, 0, static_cast<std::size_t>((cap - rows) * d) * 2);
    xin = s.x.data();
  }
  s.g.resize(static_cast<std::size_t>(cap * ff) * 4);
  s.act.resize(static_cast<std::size_t>(cap * ff) * dtype_size(dt));
  if (w.bias.size() > 0 || activation.clamped) {
    s.u.resize(static_cast<std::size_t>(cap * ff) * 4);
    mm.gemm(xin, rows, w.w1, s.g.data(), DType::F32, Epilogue::None, nullptr, cap);
    mm.gemm(xin, rows, w.w3, s.u.data(), DType::F32, Epilogue::None, nullptr, cap);
    gated_activation(s.g.as<float>(), s.u.as<float>(), w, rows, ff, activation, dt, s.act.data());
    if (cap > rows)
      std::memset(s.act.as<unsigned char>() + rows * ff * dtype_size(dt), 0, static_cast<std::size_t>((cap - rows) * ff) * dtype_size(dt));
    mm.gemm(s.act.data(), rows, w.w2, y, DType::F32);
    add_b2(y, rows, d, w);
    return;
  }
  mm.gemm(xin, rows, w.w1, s.g.data(), DType::F32, Epilogue::Silu, nullptr, cap);
  mm.gemm(xin, rows, w.w3, s.act.data(), dt, Epilogue::MulBy, s.g.as<float>(), cap);
  mm.gemm(s.act.data(), rows, w.w2, y, DType::F32);
}

}  // namespace moerun

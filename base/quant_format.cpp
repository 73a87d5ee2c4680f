// Group quantization of weight rows (q8, q4, int4) and its exact inverse.
#include "base/quant_format.hpp"

#include "base/weight_dequant.hpp"

#include <algorithm>
#include <cmath>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/weight_scheme_table.hpp"

namespace moerun {
namespace {

constexpr int kG = static_cast<int>(kQuantGroup);

void quantize_group_q8(const float* x, int8_t* q, uint16_t* d_out) {
  float amax = 0.0f;
  for (int i = 0; i < kG; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint16_t dh = f32_to_f16(amax / 127.0f);
  const float d = f16_to_f32(dh);
  // Quantized against the fp16 scale that is stored, so each q is nearest for the d it multiplies.
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < kG; ++i) q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * id), -128.0f, 127.0f));
  *d_out = dh;
}

// Squared error of x against d*q + m with q nearest in [0, 15], for d and m as fp16 would store
// them; fills q.
double q4_error(const float* x, uint16_t dh, uint16_t mh, uint8_t* q) {
  const float d = f16_to_f32(dh), m = f16_to_f32(mh);
  const float id = d > 0.0f ? 1.0f / d : 0.0f;
  double err = 0;
  for (int i = 0; i < kG; ++i) {
    q[i] = static_cast<uint8_t>(std::clamp(std::nearbyint((x[i] - m) * id), 0.0f, 15.0f));
    const double e = static_cast<double>(x[i]) - (static_cast<double>(d) * q[i] + m);
    err += e * e;
  }
  return err;
}

// q4: the min/max grid, then 20 nearby grids refitted by least squares (d, m minimising the error
// for the levels that grid picks, as llama.cpp's make_qkx2_quants); the candidate with the least
// error after fp16 rounding wins. Deterministic: no data-dependent iteration counts.
void quantize_group_q4(const float* x, uint8_t* q, uint16_t* dm) {
  const float mn = *std::min_element(x, x + kG), mx = *std::max_element(x, x + kG);
  uint8_t best_q[kG], trial[kG];
  uint16_t best_d = f32_to_f16((mx - mn) / 15.0f), best_m = f32_to_f16(mn);
  double best = q4_error(x, best_d, best_m, best_q);
  for (int step = 0; step <= 20 && mx > mn; ++step) {
    const float iscale = (15.0f - 1.0f + 0.1f * static_cast<float>(step)) / (mx - mn);
    double sl = 0, sl2 = 0, sx = 0, sxl = 0;
    for (int i = 0; i < kG; ++i) {
      const float l = std::clamp(std::nearbyint(iscale * (x[i] - mn)), 0.0f, 15.0f);
      sl += l;
      sl2 += static_cast<double>(l) * l;
      sx += x[i];
      sxl += static_cast<double>(x[i]) * l;
    }
    const double det = kG * sl2 - sl * sl;
    if (det <= 0) continue;
    const double d = (kG * sxl - sx * sl) / det, m = (sl2 * sx - sl * sxl) / det;
    if (d <= 0) continue;
    const uint16_t dh = f32_to_f16(static_cast<float>(d)), mh = f32_to_f16(static_cast<float>(m));
    const double err = q4_error(x, dh, mh, trial);
    if (err < best) {
      best = err;
      best_d = dh;
      best_m = mh;
      std::copy(trial, trial + kG, best_q);
    }
  }
  for (int i = 0; i < kG / 2; ++i) q[i] = static_cast<uint8_t>(best_q[2 * i] | (best_q[2 * i + 1] << 4));
  dm[0] = best_d;
  dm[1] = best_m;
}

// int4 as compressed-tensors quantizes a symmetric group (its calculate_qparams and quantize):
// s = max|x| / 7.5 in bf16, u = clamp(round(x / s), -8, 7) + 8, zero level 8.
void quantize_group_int4(const float* x, uint8_t* q, uint16_t* s_out, uint8_t* level) {
  float amax = 0.0f;
  for (int i = 0; i < kG; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint16_t sb = f32_to_bf16(amax / 7.5f);
  const float s = bf16_to_f32(sb);
  uint8_t u[kG];
  for (int i = 0; i < kG; ++i) u[i] = static_cast<uint8_t>(s > 0.0f ? std::clamp(std::nearbyint(x[i] / s), -8.0f, 7.0f) + 8.0f : 8.0f);
  for (int i = 0; i < kG / 2; ++i) q[i] = static_cast<uint8_t>(u[2 * i] | (u[2 * i + 1] << 4));
  *s_out = sb;
  *level = 8;
}

void check_cols(WeightScheme s, int64_t cols) {
  if (!is_group_quantized(s)) fail(ErrorKind::Internal, "quantize: not a group-quantized scheme");
  if (cols % kQuantGroup != 0) fail(ErrorKind::Internal, "quantize: ", cols, " columns are not a multiple of ", kQuantGroup);
}

}  // namespace

bool is_group_quantized(WeightScheme s) {
  return weight_scheme_row(s).kernels == WeightKernels::Group;
}

int64_t quant_row_bytes(WeightScheme s, int64_t cols) {
  return s == WeightScheme::Q8 ? cols : cols / 2;
}
int64_t quant_row_scales(WeightScheme s, int64_t cols) {
  return (s == WeightScheme::Q4 ? 2 : 1) * (cols / kQuantGroup);
}

void quantize_rows(WeightScheme s, const float* x, int64_t rows, int64_t cols, uint8_t* q, uint16_t* scales, uint8_t* levels) {
  check_cols(s, cols);
  if (s == WeightScheme::Int4 && !levels) fail(ErrorKind::Internal, "quantize: int4 needs its level bytes");
  const int64_t groups = rows * (cols / kQuantGroup);
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * kQuantGroup;
    if (s == WeightScheme::Q8)
      quantize_group_q8(xg, reinterpret_cast<int8_t*>(q) + g * kQuantGroup, scales + g);
    else if (s == WeightScheme::Q4)
      quantize_group_q4(xg, q + g * (kQuantGroup / 2), scales + 2 * g);
    else
      quantize_group_int4(xg, q + g * (kQuantGroup / 2), scales + g, levels + g);
  }
}

void dequantize_rows(WeightScheme s, const uint8_t* q, const uint16_t* scales, int64_t rows, int64_t cols, float* out,
                     const uint8_t* levels) {
  check_cols(s, cols);
  if (s == WeightScheme::Int4 && !levels) fail(ErrorKind::Internal, "dequantize: int4 needs its level bytes");
  const dequant::QuantMatrix m{s, q, reinterpret_cast<const uint8_t*>(scales), rows, cols, levels};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = dequant::weight(m, r, c);
}

}  // namespace moerun

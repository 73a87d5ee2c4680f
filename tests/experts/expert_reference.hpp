// What the expert backend tests compute references with: a quantized expert (seeded float32 weights
// quantized into the raw form the shards store, values and scales of w1, w3, w2 as
// io::expert_raw_parts lays them out, with the weights those bytes stand for), and the FFN of one
// row in float64.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/aligned_buffer.hpp"
#include "base/native_quant.hpp"
#include "base/quant_format.hpp"
#include "io/expert_shards.hpp"
#include "tests/test_support.hpp"

namespace moerun::testing {

// One quantized matrix [rows, cols] into its raw parts (values at q, scales at sc, int4's level
// bytes right after its scales) as the shards store it, and the weights those bytes stand for into `dq`.
inline void quantize_part(WeightScheme s, const std::vector<float>& w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* sc,
                          std::vector<float>& dq) {
  dq.resize(static_cast<std::size_t>(rows * cols));
  if (s == WeightScheme::Mxfp4) {
    quantize_mxfp4(w.data(), rows, cols / 32, q, sc);
    dequantize_mxfp4(q, sc, rows, cols / 32, dq.data());
  } else if (s == WeightScheme::Fp8Block) {
    quantize_fp8_block(w.data(), rows, cols, q, reinterpret_cast<float*>(sc));
    dequantize_fp8_block(q, reinterpret_cast<const float*>(sc), cols, 0, rows, dq.data());
  } else {
    uint8_t* levels = s == WeightScheme::Int4 ? sc + 2 * rows * (cols / 32) : nullptr;
    quantize_rows(s, w.data(), rows, cols, q, reinterpret_cast<uint16_t*>(sc), levels);
    dequantize_rows(s, q, reinterpret_cast<const uint16_t*>(sc), rows, cols, dq.data(), levels);
  }
}

// An expert of `c` (a quantized format) from seeded float32 weights: its raw form, and dq[0..2]
// the dequantized w1, w3, w2.
inline AlignedBuffer quantized_expert(const model::ModelConfig& c, uint32_t seed, std::vector<float> dq[3]) {
  const int64_t d = c.hidden_size, ff = c.intermediate_size;
  const std::vector<float> w[3] = {moerun::testing::random_normal(ff * d, seed, 0.125f),
                                   moerun::testing::random_normal(ff * d, seed + 1, 0.125f),
                                   moerun::testing::random_normal(d * ff, seed + 2, 0.1f)};
  const auto parts = io::expert_raw_parts(c);
  AlignedBuffer raw(io::expert_raw_bytes(c));
  const char* names[] = {"w1", "w3", "w2"};
  for (int m = 0; m < 3; ++m)
    quantize_part(c.expert_format.scheme, w[m], m == 2 ? d : ff, m == 2 ? ff : d,
                  raw.as<uint8_t>() + io::expert_part(parts, names[m]).offset,
                  raw.as<uint8_t>() + io::expert_part(parts, std::string(names[m]) + "_scales").offset, dq[m]);
  return raw;
}

// One row x [d] through the FFN in float64: y = W2 · act(W1 x + b1, W3 x + b3) + b2, act SwiGLU or
// gpt-oss's clamped form; `bias` b1‖b3‖b2 or null.
struct FfnReference {
  const std::vector<float>&w1, &w3, &w2;  // [ff, d], [ff, d], [d, ff]
  const float* bias = nullptr;
  bool clamped = false;
  double alpha = 1.702, limit = 7.0;
};
inline std::vector<double> ffn_reference(const FfnReference& f, const float* x, int64_t d, int64_t ff) {
  std::vector<double> a(static_cast<std::size_t>(ff)), y(static_cast<std::size_t>(d));
  for (int64_t i = 0; i < ff; ++i) {
    double g = f.bias ? f.bias[i] : 0, u = f.bias ? f.bias[ff + i] : 0;
    for (int64_t k = 0; k < d; ++k) {
      g += static_cast<double>(x[k]) * f.w1[i * d + k];
      u += static_cast<double>(x[k]) * f.w3[i * d + k];
    }
    if (f.clamped) {
      g = std::min(g, f.limit);
      u = std::clamp(u, -f.limit, f.limit);
      a[i] = (u + 1) * g / (1 + std::exp(-f.alpha * g));
    } else {
      a[i] = g / (1 + std::exp(-g)) * u;
    }
  }
  for (int64_t o = 0; o < d; ++o) {
    double want = f.bias ? f.bias[2 * ff + o] : 0;
    for (int64_t i = 0; i < ff; ++i) want += a[i] * f.w2[o * ff + i];
    y[o] = want;
  }
  return y;
}

}  // namespace moerun::testing

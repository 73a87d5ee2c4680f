// A quantized expert for the backend tests: seeded float32 weights quantized into the raw form
// the shards store (values and scales of w1, w3, w2 as io::expert_raw_parts lays them out), with
// the weights those bytes stand for, to compute references from.
#pragma once
#include <string>
#include <vector>

#include "base/aligned_buffer.hpp"
#include "base/native_quant.hpp"
#include "base/quant_format.hpp"
#include "io/expert_shards.hpp"
#include "tests/test_support.hpp"

namespace moerun::testing {

// One quantized matrix [rows, cols] into its raw parts (values at q, scales at sc) as the shards
// store it, and the weights those bytes stand for into `dq`.
inline void quantize_part(WeightScheme s, const std::vector<float>& w, int64_t rows, int64_t cols, uint8_t* q, uint8_t* sc, std::vector<float>& dq) {
  dq.resize(static_cast<std::size_t>(rows * cols));
  if (s == WeightScheme::Mxfp4) {
    quantize_mxfp4(w.data(), rows, cols / 32, q, sc);
    dequantize_mxfp4(q, sc, rows, cols / 32, dq.data());
  } else if (s == WeightScheme::Fp8Block) {
    quantize_fp8_block(w.data(), rows, cols, q, reinterpret_cast<float*>(sc));
    dequantize_fp8_block(q, reinterpret_cast<const float*>(sc), cols, 0, rows, dq.data());
  } else {
    quantize_rows(s, w.data(), rows, cols, q, reinterpret_cast<uint16_t*>(sc));
    dequantize_rows(s, q, reinterpret_cast<const uint16_t*>(sc), rows, cols, dq.data());
  }
}

// An expert of `c` (a quantized format) from seeded float32 weights: its raw form, and dq[0..2]
// the dequantized w1, w3, w2.
inline AlignedBuffer quantized_expert(const io::ModelConfig& c, uint32_t seed, std::vector<float> dq[3]) {
  const int64_t d = c.hidden_size, ff = c.intermediate_size;
  const std::vector<float> w[3] = {moerun::testing::random_normal(ff * d, seed, 0.125f), moerun::testing::random_normal(ff * d, seed + 1, 0.125f), moerun::testing::random_normal(d * ff, seed + 2, 0.1f)};
  const auto parts = io::expert_raw_parts(c);
  AlignedBuffer raw(io::expert_raw_bytes(c));
  const char* names[] = {"w1", "w3", "w2"};
  for (int m = 0; m < 3; ++m)
    quantize_part(c.expert_format.scheme, w[m], m == 2 ? d : ff, m == 2 ? ff : d, raw.as<uint8_t>() + io::expert_part(parts, names[m]).offset,
                  raw.as<uint8_t>() + io::expert_part(parts, std::string(names[m]) + "_scales").offset, dq[m]);
  return raw;
}

}  // namespace moerun::testing

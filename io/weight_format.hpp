// WeightFormat: how the experts' weights are stored and computed with: an element dtype plus a
// quantization scheme. Today every scheme is `plain` (f32 or bf16 elements); the quantized
// schemes are named here so that the model file, the backends and the cache tiers carry one
// parameter, and a backend refuses a format it has no kernels for (docs/FORMATS.md).
#pragma once
#include <string>

#include "base/dtype.hpp"

namespace moerun::io {

enum class WeightScheme {
  Plain,     // one element of `dtype` per weight
  Q8,        // int8 in groups with a per-group scale
  Q4,        // 4-bit in groups with a scale (and minimum)
  Mxfp4,     // E2M1 pairs with an E8M0 scale per 32 (gpt-oss)
  Fp8Block,  // e4m3 with 128x128 block scales (DeepSeek-V3)
};

struct WeightFormat {
  DType dtype = DType::F32;  // Plain: the element type; quantized: the type they dequantize to
  WeightScheme scheme = WeightScheme::Plain;

  // "f32", "bf16", "q8", "q4", "mxfp4", "fp8-block": the model file's expert_format attribute.
  std::string name() const;
  bool operator==(const WeightFormat& o) const { return dtype == o.dtype && scheme == o.scheme; }
};

// The format of `name` for experts whose dtype is `dtype`; BadInput naming `where` otherwise.
WeightFormat parse_weight_format(const std::string& name, DType dtype, const std::string& where);

}  // namespace moerun::io

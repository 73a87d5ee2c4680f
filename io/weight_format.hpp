// WeightFormat: how the experts' weights are stored and computed with: an element dtype plus a
// quantization scheme (plain f32/bf16 elements, or q8/q4 groups; mxfp4 and fp8-block are named for
// the native checkpoints and not stored yet). The model file, the backends and the cache tiers carry
// this one parameter, and a backend refuses a format it has no kernels for (docs/FORMATS.md).
#pragma once
#include <string>

#include "base/dtype.hpp"
#include "base/quant_format.hpp"

namespace moerun::io {

using moerun::WeightScheme;  // base/quant_format.hpp: the kernels and the file share it


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

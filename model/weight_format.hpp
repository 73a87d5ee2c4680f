// WeightFormat: how the experts' weights are stored and computed with: an element dtype plus a
// quantization scheme (plain f32/bf16 elements, q8/q4 groups, or the checkpoints' native int4
// (compressed-tensors), mxfp4 and fp8-block). The model file, the backends and the cache tiers carry this one parameter, and a
// backend refuses a format it has no kernels for (docs/FORMATS.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/quant_format.hpp"

namespace moerun::model {

using moerun::WeightScheme;  // base/quant_format.hpp: the kernels and the file share it

struct WeightFormat {
  DType dtype = DType::F32;  // Plain: the element type; quantized: the type they dequantize to
  WeightScheme scheme = WeightScheme::Plain;

  // "float32", "bfloat16", "q8", "q4", "int4", "mxfp4", "fp8-block": the model file's expert_format attribute.
  std::string name() const;
  bool operator==(const WeightFormat& o) const { return dtype == o.dtype && scheme == o.scheme; }
};

// Every format by name, as options take them: the two plain dtypes ("float32", "bfloat16"), then
// the weight-format table's names (base/weight_scheme_table.hpp); and that list for messages.
bool is_weight_format_name(const std::string& name);
std::vector<std::string> weight_format_names();
std::string weight_format_names_text();  // "float32, bfloat16, q8, ... or fp8-block"

// The moe-hdf5 format_version that first stores experts of `s` (the table's row). Writers write
// exactly it, so files older builds can read stay readable by them.
int64_t format_version_for(WeightScheme s);

// The format of `name` for experts whose dtype is `dtype`; BadInput naming `where` otherwise.
WeightFormat parse_weight_format(const std::string& name, DType dtype, const std::string& where);

}  // namespace moerun::model

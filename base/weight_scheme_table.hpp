// The weight-format table (ggml's type_traits in spirit): one row per way a matrix's weights are
// stored, read by every place that names, parses, sizes or versions a format: the model file's
// expert_format, the options that take one (--dtype, --quantize, --quantize-dense, bench --dtype),
// inspect's lines, the dense cache's header, and the GEMM dispatch: Matmul sends a matrix to the
// kernel family its row names; the group kernels per scheme are one row each (base/quant_matmul.cpp's
// group_kernels); the native kernels still tell mxfp4 from fp8-block inside base/native_matmul.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/quant_format.hpp"

namespace moerun {

// Which kernels multiply a matrix of the scheme: oneDNN on its element dtype (Plain), the
// group-quantized kernels over int8-quantized activations (base/quant_matmul), or the native
// kernels over float32 activations (base/native_matmul).
enum class WeightKernels : uint8_t { Dense, Group, Native };

struct WeightSchemeRow {
  WeightScheme scheme;
  const char* name;  // its one spelling ("" for Plain: the element dtype names it)
  int64_t block_cols;  // weights per scale along a row (0: no scales)
  int64_t block_rows;  // rows sharing a scale (fp8-block: 128)
  double bits_per_weight;  // stored bits per weight, scales included (levels too)
  int64_t format_version;  // the moe-hdf5 format_version that first stores experts of it
  WeightKernels kernels;  // Group: q8 / q4 / int4 (quantize_rows, quant_matmul); Native: mxfp4, fp8-block
  bool dense_quantizable;  // --quantize-dense may choose it (the dense cache stores it)
  bool convert_quantizable;  // convert --quantize and synth --dtype may produce it from floats
  const char* what;  // one line for inspect and messages
};

// Every row, Plain first, in the order options list them.
std::span<const WeightSchemeRow> weight_scheme_table();
const WeightSchemeRow& weight_scheme_row(WeightScheme s);
// The scheme spelt `name` (its table name only; Plain has none).
std::optional<WeightScheme> weight_scheme_by_name(std::string_view name);
// The names of the rows for which `pick` holds, as "a, b or c" for messages.
std::string weight_scheme_names(bool (*pick)(const WeightSchemeRow&));

}  // namespace moerun

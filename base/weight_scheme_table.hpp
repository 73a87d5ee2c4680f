// The weight-format table (ggml's type_traits in spirit): one row per way a matrix's weights are
// stored, read by every place that names, parses, sizes or versions a format: the model file's
// expert_format, the options that take one (--dtype, --quantize, --quantize-dense, bench --dtype),
// inspect's lines and the dense cache's header. The kernels per scheme are dispatched in
// base/quant_matmul.cpp and base/native_matmul.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/quant_format.hpp"

namespace moerun {

struct WeightSchemeRow {
  WeightScheme scheme;
  const char* name;          // its one spelling ("" for Plain: the element dtype names it)
  int64_t block_cols;        // weights per scale along a row (0: no scales)
  int64_t block_rows;        // rows sharing a scale (fp8-block: 128)
  double bits_per_weight;    // stored bits per weight, scales included (levels too)
  int64_t format_version;    // the moe-hdf5 format_version that first stores experts of it
  bool group_quantized;      // q8 / q4 / int4: quantize_rows and the quant_matmul kernels
  bool dense_quantizable;    // --quantize-dense may choose it (the dense cache stores it)
  bool convert_quantizable;  // convert --quantize and synth --dtype may produce it from floats
  const char* what;          // one line for inspect and messages
};

// Every row, Plain first, in the order options list them.
std::span<const WeightSchemeRow> weight_scheme_table();
const WeightSchemeRow& weight_scheme_row(WeightScheme s);
// The scheme spelt `name` (its table name only; Plain has none).
std::optional<WeightScheme> weight_scheme_by_name(std::string_view name);
// The names of the rows for which `pick` holds, as "a, b or c" for messages.
std::string weight_scheme_names(bool (*pick)(const WeightSchemeRow&));

}  // namespace moerun

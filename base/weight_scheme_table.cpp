// The weight-format table's rows.
#include "base/weight_scheme_table.hpp"

#include <array>

#include "base/error.hpp"

namespace moerun {
namespace {

// bits per weight: q8 8 + 16/32; q4 4 + 32/32; int4 4 + 16/32 + 8/32; mxfp4 4 + 8/32;
// fp8-block 8 + 32/(128*128).
constexpr std::array<WeightSchemeRow, 6> kRows{{
    {WeightScheme::Plain, "", 0, 1, 0.0, 3, WeightKernels::Dense, false, false, "one element of the dtype per weight"},
    {WeightScheme::Q8, "q8", 32, 1, 8.5, 4, WeightKernels::Group, true, true,
     "int8 in groups of 32 with an fp16 scale (Q8_0's arithmetic)"},
    {WeightScheme::Q4, "q4", 32, 1, 5.0, 4, WeightKernels::Group, true, true,
     "4-bit in groups of 32 with an fp16 scale and minimum (Q4_1's arithmetic)"},
    {WeightScheme::Int4, "int4", 32, 1, 4.75, 9, WeightKernels::Group, false, true,
     "compressed-tensors' pack-quantized INT4: groups of 32 with a bf16/fp16 scale and a zero level"},
    {WeightScheme::Mxfp4, "mxfp4", 32, 1, 4.25, 5, WeightKernels::Native, false, false,
     "E2M1 pairs with an E8M0 scale per 32 (gpt-oss, as shipped)"},
    {WeightScheme::Fp8Block, "fp8-block", 128, 128, 8.0 + 32.0 / (128 * 128), 5, WeightKernels::Native, false, false,
     "e4m3 with float32 scales per 128x128 block (DeepSeek-V3 and others, as shipped)"},
}};

}  // namespace

std::span<const WeightSchemeRow> weight_scheme_table() {
  return kRows;
}

const WeightSchemeRow& weight_scheme_row(WeightScheme s) {
  for (const WeightSchemeRow& r : kRows)
    if (r.scheme == s) return r;
  fail(ErrorKind::Internal, "weight scheme ", static_cast<int>(s), " has no row in the weight-format table");
}

std::optional<WeightScheme> weight_scheme_by_name(std::string_view name) {
  for (const WeightSchemeRow& r : kRows)
    if (r.scheme != WeightScheme::Plain && name == r.name) return r.scheme;
  return std::nullopt;
}

std::string weight_scheme_names(bool (*pick)(const WeightSchemeRow&)) {
  std::string out;
  int n = 0, total = 0;
  for (const WeightSchemeRow& r : kRows) total += r.scheme != WeightScheme::Plain && pick(r);
  for (const WeightSchemeRow& r : kRows) {
    if (r.scheme == WeightScheme::Plain || !pick(r)) continue;
    out += n == 0 ? "" : (n == total - 1 ? " or " : ", ");
    out += r.name;
    ++n;
  }
  return out;
}

}  // namespace moerun

// Weight format names.
#include "model/weight_format.hpp"

#include "base/error.hpp"

namespace moerun::model {

std::string WeightFormat::name() const {
  switch (scheme) {
    case WeightScheme::Q8: return "q8";
    case WeightScheme::Q4: return "q4";
    case WeightScheme::Int4: return "int4";
    case WeightScheme::Mxfp4: return "mxfp4";
    case WeightScheme::Fp8Block: return "fp8-block";
    default: return dtype_name(dtype);
  }
}

bool is_weight_format_name(const std::string& name) {
  for (const char* n : kWeightFormatList)
    if (name == n) return true;
  return false;
}

int64_t format_version_for(WeightScheme s) {
  if (s == WeightScheme::Plain) return 3;
  if (s == WeightScheme::Int4) return 9;
  return is_group_quantized(s) ? 4 : 5;
}

WeightFormat parse_weight_format(const std::string& name, DType dtype, const std::string& where) {
  if (name == dtype_name(dtype)) return {dtype, WeightScheme::Plain};
  for (WeightScheme s : {WeightScheme::Q8, WeightScheme::Q4, WeightScheme::Int4, WeightScheme::Mxfp4, WeightScheme::Fp8Block})
    if (WeightFormat{dtype, s}.name() == name) return {dtype, s};
  fail(ErrorKind::BadInput, where, ": expert_format \"", name, "\" is not ", dtype_name(dtype),
       " (the model's dtype), q8, q4, int4, mxfp4 or fp8-block");
}

}  // namespace moerun::model

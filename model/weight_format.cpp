// Weight format names.
#include "model/weight_format.hpp"

#include "base/error.hpp"
#include "base/weight_scheme_table.hpp"

namespace moerun::model {

std::string WeightFormat::name() const {
  return scheme == WeightScheme::Plain ? dtype_name(dtype) : weight_scheme_row(scheme).name;
}

std::vector<std::string> weight_format_names() {
  std::vector<std::string> out{"float32", "bfloat16"};
  for (const WeightSchemeRow& r : weight_scheme_table())
    if (r.scheme != WeightScheme::Plain) out.push_back(r.name);
  return out;
}

std::string weight_format_names_text() {
  return "float32, bfloat16, " + weight_scheme_names([](const WeightSchemeRow&) { return true; });
}

bool is_weight_format_name(const std::string& name) {
  for (const std::string& n : weight_format_names())
    if (name == n) return true;
  return false;
}

int64_t format_version_for(WeightScheme s) {
  return weight_scheme_row(s).format_version;
}

WeightFormat parse_weight_format(const std::string& name, DType dtype, const std::string& where) {
  if (name == dtype_name(dtype)) return {dtype, WeightScheme::Plain};
  if (const auto s = weight_scheme_by_name(name)) return {dtype, *s};
  fail(ErrorKind::BadInput, where, ": expert_format \"", name, "\" is not ", dtype_name(dtype), " (the model's dtype), ",
       weight_scheme_names([](const WeightSchemeRow&) { return true; }));
}

}  // namespace moerun::model

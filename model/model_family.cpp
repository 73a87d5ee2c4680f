// The table of supported architectures: one line per family file in model/families/.
#include "model/model_family.hpp"

#include <algorithm>

#include "model/families/families.hpp"

namespace moerun::model {

const std::vector<const ModelFamily*>& model_families() {
  static const std::vector<const ModelFamily*> all{
      &families::kMixtral,    &families::kQwen2Moe,   &families::kOlmoe,       &families::kQwen3Moe, &families::kGptOss,
      &families::kDeepseekV2, &families::kDeepseekV3, &families::kDeepseekV32, &families::kGlm4Moe,  &families::kGlmMoeDsa,
      &families::kMinimaxM2,  &families::kQwen3Next,  &families::kQwen3_5Moe};
  return all;
}

const ModelFamily* find_model_family(const std::string& name) {
  for (const ModelFamily* f : model_families())
    if (name == f->name || std::find(f->hf_aliases.begin(), f->hf_aliases.end(), name) != f->hf_aliases.end()) return f;
  return nullptr;
}

std::string supported_architectures() {
  std::string s;
  for (const ModelFamily* f : model_families()) s += std::string(s.empty() ? "" : ", ") + f->name;
  return s;
}

}  // namespace moerun::model

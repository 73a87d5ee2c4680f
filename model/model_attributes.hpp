// The root attributes of model.h5, one row each: name, stored type, the format version that
// introduced it, how it sets the config (with its default and its checks) and what a config stores.
// io/model_file reads and writes every row, required_format_version takes the newest row a config
// stores; docs/FORMATS.md describes the same rows (a test checks that it names every one).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "model/model_config.hpp"

namespace moerun::model {

enum class AttributeType : uint8_t { Integer, Float, Text };
using AttributeValue = std::variant<int64_t, double, std::string>;

struct ModelAttribute {
  std::string name;
  AttributeType type = AttributeType::Integer;
  int64_t since = 1;  // the format version that introduced it (what a file storing it needs at least)
  // Sets the config from the stored value, or from the default when the file has none: BadInput
  // naming `where` and the attribute for a value outside its set, or a required one missing.
  // Rows read in table order, so a row may use the ones above it (expert_format the dtype).
  std::function<void(ModelConfig& c, const std::optional<AttributeValue>& value, const std::string& where)> read;
  // The value this config stores; none where the file leaves it out (its readers' default holds).
  std::function<std::optional<AttributeValue>(const ModelConfig& c)> write;
};

// Every root attribute but `format` and `format_version` (the header the readers check first).
const std::vector<ModelAttribute>& model_attributes();

}  // namespace moerun::model

// JSON read from files and request lines, with the limits every reader shares: nesting at most
// kMaxJsonDepth deep (a recursive dump or comparison of a deeper value overflows the stack), no
// duplicate object keys (nlohmann keeps one copy silently), and one-line errors that quote at most a
// few dozen characters of the input.
#pragma once
#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace moerun::io {

inline constexpr int kMaxJsonDepth = 64;

// Parses `text`. On any problem throws Error(`kind`) "`source`: <why> at byte N" (without the
// prefix when `source` is empty): not valid JSON, a number beyond double, nesting deeper than
// kMaxJsonDepth, a key given twice in one object.
nlohmann::json parse_json(const std::string& text, const std::string& source, ErrorKind kind = ErrorKind::BadInput);

// A value for a message: its JSON text, cut to `max_chars` with "..." after.
std::string json_excerpt(const nlohmann::json& v, std::size_t max_chars = 40);

}  // namespace moerun::io

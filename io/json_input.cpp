// JSON parsing with a depth limit, duplicate-key checks and short errors (nlohmann's callback parser).
#include "io/json_input.hpp"

#include <cstring>
#include <unordered_set>
#include <vector>

namespace moerun::io {
namespace {

using nlohmann::json;

// The depth at which nesting goes beyond the limit: its byte offset, or npos. Strings are skipped,
// so brackets inside them do not count; the parser reports anything malformed afterwards.
std::size_t too_deep_at(const std::string& text) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string::npos;
}

// `s` cut to `max_chars`, "..." marking the cut.
std::string cut(std::string s, std::size_t max_chars) {
  if (s.size() > max_chars) s = s.substr(0, max_chars > 3 ? max_chars - 3 : 0) + "...";
  return s;
}

// nlohmann's message without its "[json.exception...] " tag and "; last read: '...'" (which
// quotes up to a whole line of input), at most 100 characters.
std::string short_reason(const char* what) {
  std::string s = what;
  if (const auto close = s.find("] "); s.rfind("[json.exception", 0) == 0 && close != std::string::npos) s = s.substr(close + 2);
  if (const auto last = s.find("; last read"); last != std::string::npos) s.resize(last);
  return cut(s, 100);
}

std::string prefixed(const std::string& source, const std::string& why) {
  return source.empty() ? why : source + ": " + why;
}

struct DuplicateKey {
  std::string key;
};

}  // namespace

json parse_json(const std::string& text, const std::string& source, ErrorKind kind) {
  // The parser stops at a NUL byte as at the end of its input: "{...}\0junk" would pass.
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    throw Error(kind, prefixed(source, str("not valid JSON: a NUL byte at byte ", nul)));
  if (const std::size_t at = too_deep_at(text); at != std::string::npos)
    throw Error(kind, prefixed(source, str("not valid JSON: nested deeper than ", kMaxJsonDepth, " levels at byte ", at)));
  std::vector<std::unordered_set<std::string>> keys;  // one set per open object
  const json::parser_callback_t check_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start)
      keys.emplace_back();
    else if (event == json::parse_event_t::object_end)
      keys.pop_back();
    else if (event == json::parse_event_t::key && !keys.back().insert(parsed.get<std::string>()).second)
      throw DuplicateKey{parsed.get<std::string>()};
    return true;
  };
  try {
    return json::parse(text, check_keys);
  } catch (const DuplicateKey& d) {
    throw Error(kind, prefixed(source, str("not valid JSON: key \"", cut(d.key, 40), "\" appears twice in one object")));
  } catch (const json::parse_error& e) {
    throw Error(kind, prefixed(source, str("not valid JSON at byte ", e.byte, " (", short_reason(e.what()), ")")));
  } catch (const json::exception& e) {
    // out_of_range for numbers beyond double ("temperature": 1e999).
    throw Error(kind, prefixed(source, str("not valid JSON (", short_reason(e.what()), ")")));
  }
}

std::string json_excerpt(const json& v, std::size_t max_chars) {
  return cut(v.dump(-1, ' ', false, json::error_handler_t::replace), max_chars);
}

}  // namespace moerun::io

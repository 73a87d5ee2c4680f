// JSONL request parsing and validation, result serialisation.
#include "io/requests.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/error.hpp"

namespace moerun::io {
namespace {

using nlohmann::json;

// Validates one line; throws std::string-ish messages via Error(BadInput) without the file prefix.
Request parse_line(const std::string& text, int64_t line_no, const RequestDefaults& d, const RequestLimits& lim) {
  Request r;
  r.line = line_no;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(ErrorKind::BadInput, "not valid JSON (", e.what(), ")");
  }
  if (!j.is_object()) fail(ErrorKind::BadInput, "expected a JSON object");
  if (j.contains("id")) {
    if (j["id"].is_string()) r.id = j["id"].get<std::string>();
    else if (j["id"].is_number_integer()) r.id = std::to_string(j["id"].get<int64_t>());
    else fail(ErrorKind::BadInput, "field id must be a string");
  }
  if (r.id.empty()) fail(ErrorKind::BadInput, "field id is missing or empty");
  if (!j.contains("prompt_tokens") || !j["prompt_tokens"].is_array())
    fail(ErrorKind::BadInput, "field prompt_tokens is missing or not an array");
  const json& toks = j["prompt_tokens"];
  if (toks.empty()) fail(ErrorKind::BadInput, "field prompt_tokens is empty");
  for (std::size_t i = 0; i < toks.size(); ++i) {
    if (!toks[i].is_number_integer()) fail(ErrorKind::BadInput, "prompt_tokens[", i, "] is not an integer");
    const int64_t t = toks[i].get<int64_t>();
    if (t < 0 || t >= lim.vocab_size)
      fail(ErrorKind::BadInput, "prompt_tokens[", i, "] = ", t, " is out of range [0, ", lim.vocab_size, ")");
    r.prompt_tokens.push_back(static_cast<int32_t>(t));
  }
  if (static_cast<int64_t>(r.prompt_tokens.size()) >= lim.max_position)
    fail(ErrorKind::BadInput, "prompt of ", r.prompt_tokens.size(), " tokens does not fit max_position ", lim.max_position);
  r.max_new_tokens = d.max_new_tokens;
  if (j.contains("max_new_tokens") && !j["max_new_tokens"].is_null()) {
    if (!j["max_new_tokens"].is_number_integer()) fail(ErrorKind::BadInput, "field max_new_tokens is not an integer");
    r.max_new_tokens = j["max_new_tokens"].get<int64_t>();
  }
  if (r.max_new_tokens < 0) fail(ErrorKind::BadInput, "field max_new_tokens is ", r.max_new_tokens, ", expected >= 0");
  r.temperature = d.temperature;
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    if (!j["temperature"].is_number()) fail(ErrorKind::BadInput, "field temperature is not a number");
    r.temperature = j["temperature"].get<double>();
  }
  if (!(r.temperature >= 0)) fail(ErrorKind::BadInput, "field temperature is ", r.temperature, ", expected >= 0");
  r.top_p = d.top_p;
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    if (!j["top_p"].is_number()) fail(ErrorKind::BadInput, "field top_p is not a number");
    r.top_p = j["top_p"].get<double>();
  }
  if (!(r.top_p > 0 && r.top_p <= 1)) fail(ErrorKind::BadInput, "field top_p is ", r.top_p, ", expected in (0, 1]");
  r.seed = d.seed;
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) fail(ErrorKind::BadInput, "field seed is not an integer");
    r.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>() : static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  return r;
}

}  // namespace

std::vector<Request> read_requests(const std::string& path, const RequestDefaults& d, const RequestLimits& lim,
                                   bool skip_invalid) {
  std::ifstream in(path);
  if (!in) fail(ErrorKind::Io, path, ": cannot open input file");
  std::vector<Request> out;
  std::unordered_map<std::string, int64_t> seen;
  std::string text;
  int64_t line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    Request r;
    try {
      r = parse_line(text, line_no, d, lim);
      auto [it, inserted] = seen.emplace(r.id, line_no);
      if (!inserted) fail(ErrorKind::BadInput, "id \"", r.id, "\" repeats line ", it->second);
    } catch (const Error& e) {
      if (!skip_invalid) fail(ErrorKind::BadInput, path, ": line ", line_no, ": ", e.what());
      if (r.id.empty() || (seen.count(r.id) && seen[r.id] != line_no)) r.id = "line:" + std::to_string(line_no);
      r.line = line_no;
      r.error = e.what();
      r.prompt_tokens.clear();
    }
    out.push_back(std::move(r));
  }
  if (in.bad()) fail(ErrorKind::Io, path, ": read error");
  return out;
}

std::string result_to_json(const Result& r) {
  json j;
  j["id"] = r.id;
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j.dump();
  }
  j["output_tokens"] = r.output_tokens;
  j["finish_reason"] = r.finish_reason;
  j["prompt_len"] = r.prompt_len;
  return j.dump();
}

bool result_from_json(const std::string& line, Result* out) {
  json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("id") || !j["id"].is_string()) return false;
  Result r;
  r.id = j["id"].get<std::string>();
  if (j.contains("error")) {
    if (!j["error"].is_string()) return false;
    r.error = j["error"].get<std::string>();
  } else {
    if (!j.contains("output_tokens") || !j.contains("finish_reason") || !j.contains("prompt_len")) return false;
    try {
      r.output_tokens = j["output_tokens"].get<std::vector<int32_t>>();
      r.finish_reason = j["finish_reason"].get<std::string>();
      r.prompt_len = j["prompt_len"].get<int64_t>();
    } catch (const json::exception&) {
      return false;
    }
  }
  *out = std::move(r);
  return true;
}

}  // namespace moerun::io

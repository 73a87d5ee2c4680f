// JSONL request parsing and validation, result serialisation.
#include "io/requests.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/error.hpp"
#include "base/xxh64.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"

namespace moerun::io {
namespace {

using nlohmann::json;

// The id of a line, when the line is a JSON object with a usable id (even if other fields are bad):
// with --skip-invalid an invalid line's result keeps the id its author gave it.
std::string id_of(const json& j) {
  if (!j.is_object() || !j.contains("id")) return "";
  const json& id = j["id"];
  if (id.is_string()) return id.get<std::string>();
  if (id.is_number_unsigned()) return std::to_string(id.get<uint64_t>());
  if (id.is_number_integer()) return std::to_string(id.get<int64_t>());
  return "";
}

// An integer field's value as text, exact for the whole uint64/int64 range (a get<int64_t> of
// 18446744073709551615 would read -1).
std::string int_text(const json& v) {
  return v.is_number_unsigned() ? std::to_string(v.get<uint64_t>()) : std::to_string(v.get<int64_t>());
}
bool fits_int64(const json& v) {
  return !v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX);
}

// A prompt fills at most max_position; one that fills it leaves no room to generate, so only a
// scoring request (max_new_tokens 0) may be that long.
std::string room_problem(int64_t prompt, int64_t max_new_tokens, const RequestLimits& lim) {
  if (prompt > lim.max_position) return str("prompt of ", prompt, " tokens does not fit max_position ", lim.max_position);
  if (prompt == lim.max_position && max_new_tokens > 0)
    return str("prompt of ", prompt, " tokens fills max_position ", lim.max_position,
               " and leaves no room to generate (with max_new_tokens 0 it is scored only)");
  return "";
}
void check_room(int64_t prompt, int64_t max_new_tokens, const RequestLimits& lim) {
  if (const std::string why = room_problem(prompt, max_new_tokens, lim); !why.empty()) fail(ErrorKind::BadInput, why);
}

int64_t cap_budget(int64_t budget, std::size_t prompt, const RequestLimits& lim) {
  return std::min(budget, lim.max_position - static_cast<int64_t>(prompt));
}

// A scoring field's top-K: absent is -1 (not asked), else an integer in [0, vocab_size]. null is
// refused as FORMATS.md says: whether it means "not asked" or "0" differs between APIs.
int64_t top_count(const json& j, const char* field, const RequestLimits& lim) {
  if (!j.contains(field)) return -1;
  const json& v = j[field];
  if (v.is_null()) fail(ErrorKind::BadInput, "field ", field, " is null (leave it out, or give an integer in [0, ", lim.vocab_size, "])");
  if (!v.is_number_integer()) fail(ErrorKind::BadInput, "field ", field, " is not an integer (the number of top alternatives)");
  if (!fits_int64(v) || v.get<int64_t>() < 0 || v.get<int64_t>() > lim.vocab_size)
    fail(ErrorKind::BadInput, "field ", field, " is ", int_text(v), ", expected in [0, ", lim.vocab_size, "] (the vocabulary)");
  return v.get<int64_t>();
}

// A number field in [lo, hi] (absent or null: `neutral`).
double number_in(const json& j, const char* key, double lo, double hi, double neutral) {
  if (!j.contains(key) || j[key].is_null()) return neutral;
  if (!j[key].is_number()) fail(ErrorKind::BadInput, "field ", key, " is not a number");
  const double v = j[key].get<double>();
  if (!(v >= lo && v <= hi)) fail(ErrorKind::BadInput, "field ", key, " is ", v, ", expected in [", lo, ", ", hi, "]");
  return v;
}

// top_k, min_p, the three penalties and logit_bias, checked as vLLM checks them (top_k -1 or 0:
// off; penalties in [-2, 2], repetition_penalty in (0, 2]; logit_bias ids in the vocabulary, biases
// in [-100, 100], at most 300 of them as the API allows).
SamplingFields sampling_fields(const json& j, const RequestLimits& lim) {
  SamplingFields f;
  if (j.contains("top_k") && !j["top_k"].is_null()) {
    const json& v = j["top_k"];
    if (!v.is_number_integer() || !fits_int64(v) || v.get<int64_t>() < -1)
      fail(ErrorKind::BadInput, "field top_k is ", v.dump(), ", expected an integer >= 1 (or -1 or 0: all tokens)");
    f.top_k = std::max<int64_t>(v.get<int64_t>(), 0);
  }
  f.min_p = number_in(j, "min_p", 0, 1, 0);
  f.presence_penalty = number_in(j, "presence_penalty", -2, 2, 0);
  f.frequency_penalty = number_in(j, "frequency_penalty", -2, 2, 0);
  f.repetition_penalty = number_in(j, "repetition_penalty", 0, 2, 1);
  if (f.repetition_penalty == 0) fail(ErrorKind::BadInput, "field repetition_penalty is 0, expected in (0, 2]");
  if (j.contains("logit_bias") && !j["logit_bias"].is_null()) {
    const json& b = j["logit_bias"];
    if (!b.is_object()) fail(ErrorKind::BadInput, "field logit_bias is not an object of token ids and biases");
    if (b.size() > 300) fail(ErrorKind::BadInput, "field logit_bias has ", b.size(), " tokens, at most 300");
    for (auto it = b.begin(); it != b.end(); ++it) {
      const std::string& key = it.key();
      const bool digits =
          !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || std::stoll(key) >= lim.vocab_size)
        fail(ErrorKind::BadInput, "field logit_bias has key \"", key.substr(0, 20), "\", not a token id in [0, ", lim.vocab_size, ")");
      if (!it.value().is_number() || !(it.value().get<double>() >= -100 && it.value().get<double>() <= 100))
        fail(ErrorKind::BadInput, "field logit_bias[\"", key, "\"] is ", it.value().dump(), ", expected a number in [-100, 100]");
      f.logit_bias.emplace_back(static_cast<int32_t>(std::stoll(key)), it.value().get<float>());
    }
    std::sort(f.logit_bias.begin(), f.logit_bias.end());
  }
  return f;
}

// Validates one parsed line; throws Error(BadInput) without the file and line prefix.
Request parse_object(const json& j, const RequestDefaults& d, const RequestLimits& lim) {
  Request r;
  if (!j.is_object()) fail(ErrorKind::BadInput, "expected a JSON object");
  if (j.contains("id") && !j["id"].is_string() && !j["id"].is_number_integer()) fail(ErrorKind::BadInput, "field id must be a string");
  r.id = id_of(j);
  if (r.id.empty()) fail(ErrorKind::BadInput, "field id is missing or empty");
  const bool tokens = j.contains("prompt_tokens") && !j["prompt_tokens"].is_null();
  const bool text = j.contains("prompt") && !j["prompt"].is_null();
  if (tokens && text) fail(ErrorKind::BadInput, "give prompt_tokens or prompt (text), not both");
  if (text) {
    if (!j["prompt"].is_string()) fail(ErrorKind::BadInput, "field prompt is not a string");
    r.prompt_text = j["prompt"].get<std::string>();
    if (r.prompt_text.empty()) fail(ErrorKind::BadInput, "field prompt is empty");
    r.has_text = true;
  } else {
    if (!tokens || !j["prompt_tokens"].is_array())
      fail(ErrorKind::BadInput, "field prompt_tokens is missing or not an array (or give \"prompt\" text)");
    const json& toks = j["prompt_tokens"];
    if (toks.empty()) fail(ErrorKind::BadInput, "field prompt_tokens is empty");
    if (static_cast<int64_t>(toks.size()) > lim.max_position)
      fail(ErrorKind::BadInput, "prompt of ", toks.size(), " tokens does not fit max_position ", lim.max_position);
    r.prompt_tokens.reserve(toks.size());
    for (std::size_t i = 0; i < toks.size(); ++i) {
      if (!toks[i].is_number_integer()) fail(ErrorKind::BadInput, "prompt_tokens[", i, "] is not an integer");
      if (!fits_int64(toks[i]) || toks[i].get<int64_t>() < 0 || toks[i].get<int64_t>() >= lim.vocab_size)
        fail(ErrorKind::BadInput, "prompt_tokens[", i, "] = ", int_text(toks[i]), " is out of range [0, ", lim.vocab_size, ")");
      r.prompt_tokens.push_back(static_cast<int32_t>(toks[i].get<int64_t>()));
    }
  }
  r.max_new_tokens = d.max_new_tokens;
  if (j.contains("max_new_tokens") && !j["max_new_tokens"].is_null()) {
    const json& v = j["max_new_tokens"];
    if (!v.is_number_integer()) fail(ErrorKind::BadInput, "field max_new_tokens is not an integer");
    if (!fits_int64(v)) fail(ErrorKind::BadInput, "field max_new_tokens is ", int_text(v), ", expected at most ", INT64_MAX);
    r.max_new_tokens = v.get<int64_t>();
  }
  if (r.max_new_tokens < 0) fail(ErrorKind::BadInput, "field max_new_tokens is ", r.max_new_tokens, ", expected >= 0");
  if (!r.has_text) check_room(static_cast<int64_t>(r.prompt_tokens.size()), r.max_new_tokens, lim);
  // Generation stops at max_position anyway: the effective budget, so that no later sum of
  // prompt and budget can overflow (text prompts: once they are tokenized).
  if (!r.has_text) r.max_new_tokens = cap_budget(r.max_new_tokens, r.prompt_tokens.size(), lim);
  r.temperature = d.temperature;
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    if (!j["temperature"].is_number()) fail(ErrorKind::BadInput, "field temperature is not a number");
    r.temperature = j["temperature"].get<double>();
  }
  if (!(r.temperature >= 0 && std::isfinite(r.temperature)))
    fail(ErrorKind::BadInput, "field temperature is ", r.temperature, ", expected a finite number >= 0");
  r.top_p = d.top_p;
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    if (!j["top_p"].is_number()) fail(ErrorKind::BadInput, "field top_p is not a number");
    r.top_p = j["top_p"].get<double>();
  }
  if (!(r.top_p > 0 && r.top_p <= 1)) fail(ErrorKind::BadInput, "field top_p is ", r.top_p, ", expected in (0, 1]");
  r.logprobs = top_count(j, "logprobs", lim);
  r.prompt_logprobs = top_count(j, "prompt_logprobs", lim);
  if (j.contains("echo")) {
    if (!j["echo"].is_boolean()) fail(ErrorKind::BadInput, "field echo is not true or false");
    // OpenAI's completions: echo returns the prompt's log-probs with as many alternatives as logprobs.
    // With prompt_logprobs as well, two fields would set one count: refused rather than one winning.
    if (j["echo"].get<bool>()) {
      if (r.prompt_logprobs >= 0)
        fail(ErrorKind::BadInput, "fields echo and prompt_logprobs both ask for the prompt's log-probs: give one of them");
      r.prompt_logprobs = std::max<int64_t>(r.logprobs, 0);
    }
  }
  r.seed = d.seed;
  if (j.contains("seed") && !j["seed"].is_null()) {
    if (!j["seed"].is_number_integer()) fail(ErrorKind::BadInput, "field seed is not an integer");
    r.seed = j["seed"].is_number_unsigned() ? j["seed"].get<uint64_t>() : static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  r.sampling = sampling_fields(j, lim);
  return r;
}

}  // namespace

// Parses one line. Returns the request, or (with `error` set) the id found, if any, and why the
// line is invalid. Never throws for the line's content.
Request parse_request_line(const std::string& text, int64_t line_no, const RequestDefaults& d, const RequestLimits& lim) {
  Request r;
  json j;
  // The JSON parser stops at a NUL byte as at the end of its input: "{...}\0junk" would pass.
  if (const auto nul = text.find('\0'); nul != std::string::npos) {
    r.error = str("contains a NUL byte at column ", nul + 1);
  } else {
    try {
      j = parse_json(text, "");
    } catch (const Error& e) {
      r.error = e.what();
    }
  }
  if (r.error.empty()) {
    try {
      r = parse_object(j, d, lim);
    } catch (const Error& e) {
      r = Request{};
      r.id = id_of(j);
      r.error = e.what();
    } catch (const json::exception& e) {
      r = Request{};
      r.id = id_of(j);
      r.error = str("unreadable field (", e.what(), ")");
    }
  }
  r.line = line_no;
  if (!r.error.empty()) r.prompt_tokens.clear();
  return r;
}

bool any_text_prompt(const std::vector<Request>& requests) {
  for (const Request& r : requests)
    if (r.has_text && r.error.empty()) return true;
  return false;
}

void tokenize_prompts(std::vector<Request>& requests, const std::string& path, const RequestLimits& lim, bool skip_invalid,
                      const std::function<std::vector<std::vector<int32_t>>(const std::vector<std::string>&)>& encode) {
  std::vector<Request*> todo;
  std::vector<std::string> texts;
  for (Request& r : requests)
    if (r.has_text && r.error.empty() && !r.prompt_text.empty()) {  // a chat request's prompt is its template's (io/openai_batch)
      todo.push_back(&r);
      texts.push_back(r.prompt_text);
    }
  if (todo.empty()) return;
  const auto ids = encode(texts);
  if (ids.size() != todo.size()) fail(ErrorKind::Internal, "the tokenizer returned ", ids.size(), " prompts for ", todo.size());
  for (std::size_t i = 0; i < todo.size(); ++i) {
    Request& r = *todo[i];
    std::string why;
    if (ids[i].empty())
      why = "prompt is empty after tokenization";
    else
      why = room_problem(static_cast<int64_t>(ids[i].size()), r.max_new_tokens, lim);
    for (std::size_t k = 0; k < ids[i].size() && why.empty(); ++k)
      if (ids[i][k] < 0 || ids[i][k] >= lim.vocab_size)
        why = str("the tokenizer gives token ", ids[i][k], ", outside the model's vocabulary [0, ", lim.vocab_size, ")");
    if (!why.empty()) {
      if (!skip_invalid) fail(ErrorKind::BadInput, path, ": line ", r.line, ": ", why);
      r.error = why;
      continue;
    }
    r.prompt_tokens = ids[i];
    r.max_new_tokens = cap_budget(r.max_new_tokens, r.prompt_tokens.size(), lim);
  }
}

namespace {
// The sampling fields' part of a fingerprint: 0 when neutral, so journals written before they
// existed still resume.
uint64_t sampling_fingerprint(const SamplingFields& f) {
  if (f.neutral()) return 0;
  Xxh64 h;
  h.value(f.top_k).value(f.min_p).value(f.presence_penalty).value(f.frequency_penalty).value(f.repetition_penalty);
  for (const auto& [id, bias] : f.logit_bias) h.value(id).value(bias);
  return h.digest();
}
}  // namespace

uint64_t request_fingerprint(const Request& r) {
  // Everything that decides a request's result besides the model and the routing options.
  return Xxh64()
      .text(r.id)
      .vec(r.prompt_tokens)
      .value(r.has_text)
      .text(r.prompt_text)
      .value(r.max_new_tokens)
      .value(r.temperature)
      .value(r.top_p)
      .value(r.seed)
      .value(r.logprobs)
      .value(r.prompt_logprobs)
      .value(r.score_from)
      .text(r.error)
      .text([&] {
        std::string all;
        for (const std::string& s : r.stop) all += s + '\0';
        return all;
      }())
      .value(sampling_fingerprint(r.sampling))
      .digest();
}

std::string read_requests_text(const std::string& path) {
  return read_stream_file(path, "--input");
}

std::vector<Request> read_requests(const std::string& path, const RequestDefaults& d, const RequestLimits& lim, bool skip_invalid) {
  return parse_requests(read_requests_text(path), path, d, lim, skip_invalid);
}

std::vector<Request> parse_requests(const std::string& all, const std::string& path, const RequestDefaults& d, const RequestLimits& lim,
                                    bool skip_invalid) {
  return parse_lines(all, path, skip_invalid, [&](const std::string& t, int64_t n) { return parse_request_line(t, n, d, lim); });
}

std::vector<Request> parse_lines(const std::string& all, const std::string& path, bool skip_invalid,
                                 const std::function<Request(const std::string&, int64_t)>& parse_line) {
  std::istringstream in(all);
  std::vector<Request> out;
  std::unordered_map<std::string, int64_t> claimed;  // id -> the line that has it (first in input order)
  std::string text;
  int64_t line_no = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines are allowed
    Request r = parse_line(text, line_no);
    if (!r.id.empty()) {
      auto [it, inserted] = claimed.emplace(r.id, line_no);
      if (!inserted) {
        if (r.error.empty()) r.error = str("id \"", r.id, "\" repeats line ", it->second);
        r.id.clear();  // the id belongs to the earlier line
        r.prompt_tokens.clear();
      }
    }
    if (!r.error.empty() && !skip_invalid) fail(ErrorKind::BadInput, path, ": line ", line_no, ": ", r.error);
    out.push_back(std::move(r));
  }
  // Invalid lines without an id of their own get "line:N", made unique against every id in the
  // file, so that no two results ever share an id.
  for (Request& r : out) {
    if (!r.id.empty()) continue;
    std::string id = "line:" + std::to_string(r.line);
    for (int k = 2; claimed.count(id); ++k) id = "line:" + std::to_string(r.line) + "#" + std::to_string(k);
    claimed.emplace(id, r.line);
    r.id = id;
  }
  return out;
}

namespace {

json logprobs_json(const std::vector<TokenLogprob>& v) {
  json a = json::array();
  for (const TokenLogprob& t : v) {
    json top = json::array();
    for (const auto& [id, lp] : t.top) top.push_back(json::array({id, lp}));
    a.push_back(json{{"token", t.token}, {"logprob", t.logprob}, {"top", std::move(top)}});
  }
  return a;
}

// JSON has no NaN or Inf: nlohmann writes them as null, so null reads back as NaN (a journal line
// moerun writes is always one it reads back).
double logprob_from_json(const json& v) {
  return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

// Throws json::exception on a malformed entry (result_from_json turns it into false).
std::vector<TokenLogprob> logprobs_from_json(const json& a) {
  std::vector<TokenLogprob> v;
  for (const json& e : a) {
    TokenLogprob t;
    t.token = e.at("token").get<int32_t>();
    t.logprob = logprob_from_json(e.at("logprob"));
    for (const json& p : e.at("top")) t.top.emplace_back(p.at(0).get<int32_t>(), logprob_from_json(p.at(1)));
    v.push_back(std::move(t));
  }
  return v;
}

}  // namespace

std::string result_to_json(const Result& r, bool with_key) {
  json j;
  j["id"] = r.id;
  if (with_key && !r.key.empty()) j["key"] = r.key;
  if (!r.error.empty()) {
    j["error"] = r.error;
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  j["output_tokens"] = r.output_tokens;
  if (r.has_text) j["text"] = r.text;
  j["finish_reason"] = r.finish_reason;
  j["prompt_len"] = r.prompt_len;
  if (r.has_prompt_logprobs) j["prompt_logprobs"] = logprobs_json(r.prompt_logprobs);
  if (r.has_logprobs) j["logprobs"] = logprobs_json(r.logprobs);
  // A tokenizer may decode to invalid UTF-8 (a cut multi-byte character): replaced, not thrown.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool result_from_json(const std::string& line, Result* out) {
  json j;
  try {
    j = parse_json(line, "");
  } catch (const Error&) {
    return false;
  }
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) return false;
  Result r;
  r.id = j["id"].get<std::string>();
  if (j.contains("key")) {
    if (!j["key"].is_string()) return false;
    r.key = j["key"].get<std::string>();
  }
  if (j.contains("error")) {
    if (!j["error"].is_string()) return false;
    r.error = j["error"].get<std::string>();
  } else {
    if (!j.contains("output_tokens") || !j.contains("finish_reason") || !j.contains("prompt_len")) return false;
    try {
      r.output_tokens = j["output_tokens"].get<std::vector<int32_t>>();
      r.finish_reason = j["finish_reason"].get<std::string>();
      r.prompt_len = j["prompt_len"].get<int64_t>();
      if ((r.has_prompt_logprobs = j.contains("prompt_logprobs"))) r.prompt_logprobs = logprobs_from_json(j["prompt_logprobs"]);
      if ((r.has_logprobs = j.contains("logprobs"))) r.logprobs = logprobs_from_json(j["logprobs"]);
    } catch (const json::exception&) {
      return false;
    }
  }
  *out = std::move(r);
  return true;
}

}  // namespace moerun::io

// OpenAI Batch API input and output lines.
#include "io/openai_batch.hpp"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.hpp"
#include "base/xxh64.hpp"
#include "io/json_input.hpp"

namespace moerun::io {
namespace {

using nlohmann::json;

// Body fields moerun reads, per endpoint; what it refuses unless neutral; the rest is ignored with
// a warning (user, metadata, store, service_tier, stream_options, ...).
const std::set<std::string> kRead = {"model",
                                     "messages",
                                     "prompt",
                                     "max_tokens",
                                     "max_completion_tokens",
                                     "temperature",
                                     "top_p",
                                     "seed",
                                     "stop",
                                     "n",
                                     "logprobs",
                                     "top_logprobs",
                                     "echo",
                                     "chat_template_kwargs",
                                     "chat_template",
                                     "top_k",
                                     "min_p",
                                     "presence_penalty",
                                     "frequency_penalty",
                                     "repetition_penalty",
                                     "logit_bias"};

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A field that would change the result if moerun ignored it: refused on its line unless it is
// absent, null or neutral (n 1, no tools, no stream, a plain text format).
std::string unsupported(const json& b) {
  auto set = [&](const char* k) { return b.contains(k) && !b[k].is_null(); };
  if (set("n") && b["n"] != 1) return "field body.n is " + b["n"].dump() + ": one choice per request is supported (n 1)";
  for (const char* k : {"tools", "tool_choice", "functions", "function_call"})
    if (set(k) && !(b[k].is_array() && b[k].empty())) return str("field body.", k, " is set: tool calls are not supported");
  if (set("stream") && b["stream"] != false) return "field body.stream is true: a batch has no stream";
  if (set("response_format") && !(b["response_format"].is_object() && b["response_format"].value("type", "") == "text"))
    return "field body.response_format asks for structured output: not supported";
  if (set("suffix") && b["suffix"] != "") return "field body.suffix is set: not supported";
  return "";
}

// Chat messages: roles and text content only (an image or audio part is refused).
void check_messages(const json& m) {
  if (!m.is_array() || m.empty()) fail(ErrorKind::BadInput, "field body.messages is missing or not a non-empty array");
  for (std::size_t i = 0; i < m.size(); ++i) {
    const json& e = m[i];
    if (!e.is_object() || !e.contains("role") || !e["role"].is_string()) fail(ErrorKind::BadInput, "body.messages[", i, "] has no role");
    if (!e.contains("content")) continue;  // an assistant turn with only tool calls: the template decides
    const json& c = e["content"];
    if (c.is_string() || c.is_null()) continue;
    if (!c.is_array()) fail(ErrorKind::BadInput, "body.messages[", i, "].content is neither text nor a list of parts");
    for (const json& p : c)
      if (!p.is_object() || p.value("type", "") != "text")
        fail(ErrorKind::BadInput, "body.messages[", i, "].content has a part of type ", p.is_object() ? p.value("type", "?") : "?",
             ": only text is supported");
  }
}

std::vector<std::string> stop_strings(const json& b) {
  if (!b.contains("stop") || b["stop"].is_null()) return {};
  const json& s = b["stop"];
  std::vector<std::string> out;
  if (s.is_string())
    out.push_back(s.get<std::string>());
  else if (s.is_array() && s.size() <= 4)
    for (const json& v : s) {
      if (!v.is_string()) fail(ErrorKind::BadInput, "field body.stop holds ", v.dump(), ", not a string");
      out.push_back(v.get<std::string>());
    }
  else
    fail(ErrorKind::BadInput, "field body.stop is not a string or a list of up to 4 strings");
  for (const std::string& t : out)
    if (t.empty()) fail(ErrorKind::BadInput, "field body.stop holds an empty string");
  return out;
}

// Which field of the body sets the token budget (max_completion_tokens wins, as the API's does).
const char* budget_field(const json& b) {
  return b.contains("max_completion_tokens") && !b["max_completion_tokens"].is_null() ? "max_completion_tokens" : "max_tokens";
}

// Chat's logprobs is a boolean, top_logprobs (0..20) needs it: as the API refuses them.
json chat_logprobs_field(const json& b) {
  const bool has_lp = b.contains("logprobs") && !b["logprobs"].is_null(),
             has_top = b.contains("top_logprobs") && !b["top_logprobs"].is_null();
  if (has_lp && !b["logprobs"].is_boolean())
    fail(ErrorKind::BadInput, "field body.logprobs is ", b["logprobs"].dump(), ": chat takes true or false (top_logprobs sets the count)");
  if (has_top &&
      !(b["top_logprobs"].is_number_integer() && b["top_logprobs"].get<int64_t>() >= 0 && b["top_logprobs"].get<int64_t>() <= 20))
    fail(ErrorKind::BadInput, "field body.top_logprobs is ", b["top_logprobs"].dump(), ": an integer in [0, 20] is expected");
  const bool on = has_lp && b["logprobs"].get<bool>();
  if (has_top && !on) fail(ErrorKind::BadInput, "field body.top_logprobs is set, but body.logprobs is not true");
  return on ? (has_top ? b["top_logprobs"] : json(0)) : json();
}

// moerun's request object for the body's common fields; the endpoint's own ones into `oa`.
json moerun_object(const json& b, OpenAiRequest& oa) {
  json m{{"id", oa.custom_id}};
  const char* budget = budget_field(b);
  if (b.contains(budget) && !b[budget].is_null()) m["max_new_tokens"] = b[budget];
  for (const char* k :
       {"temperature", "top_p", "seed", "top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias"})
    if (b.contains(k)) m[k] = b[k];
  oa.stop = stop_strings(b);
  if (b.contains("model") && b["model"].is_string()) oa.model = b["model"].get<std::string>();
  if (oa.chat) {
    check_messages(b.value("messages", json()));
    oa.messages = b["messages"].dump();
    const json kw = b.value("chat_template_kwargs", json::object());
    if (!kw.is_object()) fail(ErrorKind::BadInput, "field body.chat_template_kwargs is not an object");
    oa.template_kwargs = kw.dump();
    // transformers' apply_chat_template(chat_template=...): one of the model's templates by name,
    // else the text is itself a template (vLLM's per-request chat_template).
    if (b.contains("chat_template") && !b["chat_template"].is_null()) {
      if (!b["chat_template"].is_string() || b["chat_template"].get<std::string>().empty())
        fail(ErrorKind::BadInput, "field body.chat_template is not a template name or a template's text");
      oa.chat_template = b["chat_template"].get<std::string>();
    }
    m["prompt"] = "(chat)";  // the prompt comes from the template: render_chat_prompts
    if (const json lp = chat_logprobs_field(b); !lp.is_null()) m["logprobs"] = lp;
    if (b.contains("echo") && !b["echo"].is_null())
      fail(ErrorKind::BadInput, "field body.echo is set: it is a /v1/completions field, chat has none");
    return m;
  }
  const json p = b.value("prompt", json());
  if (p.is_string())
    m["prompt"] = p;
  else if (p.is_array() && p.size() == 1 && p[0].is_string())
    m["prompt"] = p[0];
  else if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& v) { return v.is_number_integer(); }))
    m["prompt_tokens"] = p;
  else
    fail(ErrorKind::BadInput, "field body.prompt is not a string, a list of one string, or a list of token ids");
  if (b.contains("top_logprobs") && !b["top_logprobs"].is_null())
    fail(ErrorKind::BadInput, "field body.top_logprobs is a chat field; /v1/completions takes logprobs (an integer) alone");
  if (b.contains("logprobs") && !b["logprobs"].is_null()) {
    if (!b["logprobs"].is_number_integer() || b["logprobs"].get<int64_t>() < 0 || b["logprobs"].get<int64_t>() > 5)
      fail(ErrorKind::BadInput, "field body.logprobs is ", b["logprobs"].dump(), ": /v1/completions takes an integer in [0, 5]");
    m["logprobs"] = b["logprobs"];
  }
  if (b.contains("echo") && !b["echo"].is_null()) {
    if (!b["echo"].is_boolean()) fail(ErrorKind::BadInput, "field body.echo is not true or false");
    oa.echo = b["echo"].get<bool>();
  }
  return m;
}

// moerun's field names in a request's error, as the line spelled them ("field max_new_tokens" was
// the line's body.max_tokens).
std::string openai_field_names(std::string msg, const json& b, bool chat) {
  const std::pair<std::string, std::string> names[] = {{"field max_new_tokens", str("field body.", budget_field(b))},
                                                       {"field logprobs", chat ? "field body.top_logprobs" : "field body.logprobs"},
                                                       {"field temperature", "field body.temperature"},
                                                       {"field top_p", "field body.top_p"},
                                                       {"field seed", "field body.seed"},
                                                       {"field top_k", "field body.top_k"},
                                                       {"field min_p", "field body.min_p"},
                                                       {"field presence_penalty", "field body.presence_penalty"},
                                                       {"field frequency_penalty", "field body.frequency_penalty"},
                                                       {"field repetition_penalty", "field body.repetition_penalty"},
                                                       {"field logit_bias", "field body.logit_bias"},
                                                       {"field prompt_tokens", "field body.prompt"},
                                                       {"field prompt", "field body.prompt"}};
  for (const auto& [ours, theirs] : names)
    if (msg.starts_with(ours) && (msg.size() == ours.size() || msg[ours.size()] == ' ' || msg[ours.size()] == '['))
      return theirs + msg.substr(ours.size());
  return msg;
}

// One line: the request, or its error (never throws for the line's content).
Request parse_openai_line(const std::string& text, int64_t line_no, const RequestDefaults& d, const RequestLimits& lim,
                          std::set<std::string>& ignored) {
  auto oa = std::make_shared<OpenAiRequest>();
  Request r;
  try {
    const json j = parse_json(text, "");
    if (!j.is_object()) fail(ErrorKind::BadInput, "expected a JSON object");
    if (j.contains("custom_id") && j["custom_id"].is_string()) oa->custom_id = j["custom_id"].get<std::string>();
    if (oa->custom_id.empty()) fail(ErrorKind::BadInput, "field custom_id is missing or not a non-empty string");
    if (j.value("method", "") != "POST") fail(ErrorKind::BadInput, "field method is not \"POST\"");
    const std::string url = j.value("url", "");
    if (url != "/v1/chat/completions" && url != "/v1/completions")
      fail(ErrorKind::BadInput, "field url is \"", url, "\": /v1/chat/completions and /v1/completions are served");
    oa->chat = url == "/v1/chat/completions";
    if (!j.contains("body") || !j["body"].is_object()) fail(ErrorKind::BadInput, "field body is missing or not an object");
    const json& b = j["body"];
    if (const std::string why = unsupported(b); !why.empty()) fail(ErrorKind::BadInput, why);
    const json m = moerun_object(b, *oa);
    for (auto it = b.begin(); it != b.end(); ++it)
      if (!kRead.count(it.key())) ignored.insert(it.key());
    r = parse_request_line(m.dump(), line_no, d, lim);
    if (!r.error.empty()) r.error = openai_field_names(r.error, b, oa->chat);
    if (oa->chat && r.error.empty()) r.prompt_text.clear();
    r.stop = oa->stop;
  } catch (const Error& e) {
    r = Request{};
    r.error = e.what();
  } catch (const json::exception& e) {
    r = Request{};
    r.error = str("unreadable field (", e.what(), ")");
  }
  r.id = oa->custom_id;
  r.line = line_no;
  r.has_text = true;  // the output carries text
  r.openai = oa;
  return r;
}

std::string token_text(const std::unordered_map<int32_t, std::string>& texts, int32_t id) {
  const auto it = texts.find(id);
  return it == texts.end() ? std::string() : it->second;
}
json bytes_of(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(static_cast<int>(c));
  return a;
}

json chat_logprobs(const Result& res, const std::unordered_map<int32_t, std::string>& texts) {
  json content = json::array();
  for (const TokenLogprob& t : res.logprobs) {
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      const std::string s = token_text(texts, id);
      top.push_back({{"token", s}, {"logprob", lp}, {"bytes", bytes_of(s)}});
    }
    const std::string s = token_text(texts, t.token);
    content.push_back({{"token", s}, {"logprob", t.logprob}, {"bytes", bytes_of(s)}, {"top_logprobs", std::move(top)}});
  }
  return json{{"content", std::move(content)}};
}

json completion_logprobs(const Result& res, const std::unordered_map<int32_t, std::string>& texts) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  int64_t at = 0;
  for (const TokenLogprob& t : res.logprobs) {
    const std::string s = token_text(texts, t.token);
    tokens.push_back(s);
    lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[token_text(texts, id)] = lp;
    tops.push_back(std::move(top));
    offsets.push_back(at);
    at += static_cast<int64_t>(s.size());
  }
  return json{{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

}  // namespace

bool is_openai_batch(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    return j.is_object() && j.contains("custom_id") && j.contains("body");
  }
  return false;
}

std::vector<Request> parse_openai_batch(const std::string& text, const std::string& path, const RequestDefaults& d,
                                        const RequestLimits& lim, std::set<std::string>& ignored) {
  std::vector<Request> out =
      parse_lines(text, path, true, [&](const std::string& t, int64_t n) { return parse_openai_line(t, n, d, lim, ignored); });
  // parse_lines names a repeated or missing id "line:N"; the output keeps the line's custom_id.
  return out;
}

void render_chat_prompts(std::vector<Request>& requests, const RequestLimits& lim,
                         const std::function<std::vector<ChatTokens>(const std::vector<ChatPrompt>&)>& render) {
  std::vector<Request*> todo;
  std::vector<ChatPrompt> prompts;
  for (Request& r : requests)
    if (r.openai && r.openai->chat && r.error.empty()) {
      todo.push_back(&r);
      prompts.push_back({r.openai->messages, r.openai->template_kwargs, r.openai->chat_template});
    }
  if (todo.empty()) return;
  const std::vector<ChatTokens> got = render(prompts);
  if (got.size() != todo.size()) fail(ErrorKind::Internal, "the chat template gave ", got.size(), " prompts for ", todo.size());
  for (std::size_t i = 0; i < todo.size(); ++i) {
    Request& r = *todo[i];
    std::string why = got[i].error;
    const auto& ids = got[i].ids;
    if (why.empty() && ids.empty()) why = "the chat template rendered an empty prompt";
    for (std::size_t k = 0; k < ids.size() && why.empty(); ++k)
      if (ids[k] < 0 || ids[k] >= lim.vocab_size)
        why = str("the tokenizer gives token ", ids[k], ", outside the model's vocabulary [0, ", lim.vocab_size, ")");
    if (why.empty() && static_cast<int64_t>(ids.size()) >= lim.max_position)
      why = str("prompt of ", ids.size(), " tokens leaves no room to generate in max_position ", lim.max_position);
    if (!why.empty()) {
      r.error = why;
      continue;
    }
    r.prompt_tokens = ids;
    r.max_new_tokens = std::min(r.max_new_tokens, lim.max_position - static_cast<int64_t>(ids.size()));
    if (got[i].opens_think) {
      auto oa = std::make_shared<OpenAiRequest>(*r.openai);
      oa->prompt_opens_think = true;
      r.openai = oa;
    }
  }
}

ReasoningSplit split_reasoning(const std::string& text, bool prompt_opens_think) {
  static const std::string open = "<think>", close = "</think>";
  std::string t = text;
  const std::size_t lead = t.find_first_not_of(" \n");
  const bool opened = lead != std::string::npos && t.compare(lead, open.size(), open) == 0;
  if (opened) t.erase(0, lead + open.size());
  const std::size_t end = t.find(close);
  if (end == std::string::npos) return opened || prompt_opens_think ? ReasoningSplit{t, ""} : ReasoningSplit{"", text};
  std::string content = t.substr(end + close.size());
  content.erase(0, content.find_first_not_of('\n') == std::string::npos ? content.size() : content.find_first_not_of('\n'));
  return {t.substr(0, end), content};
}

std::string openai_result_line(const Request& r, const Result& res, int64_t created,
                               const std::unordered_map<int32_t, std::string>& token_texts, bool split) {
  const OpenAiRequest& oa = *r.openai;
  const std::string h = hex(Xxh64().text(oa.custom_id).value(r.line).digest());
  json out{{"id", "batch_req_" + h}, {"custom_id", oa.custom_id}};
  const std::string error = !r.error.empty() ? r.error : res.error;
  if (!error.empty()) {
    out["response"] = nullptr;
    out["error"] = {{"code", r.error.empty() ? "server_error" : "invalid_request"}, {"message", error}};
    return out.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  // The first stop string in the generated text ends it; what follows is dropped.
  std::string text = res.text;
  bool stopped = res.finish_reason == "eos" || res.finish_reason == "stop";
  std::size_t cut = std::string::npos;
  for (const std::string& s : oa.stop) cut = std::min(cut, text.find(s));
  if (cut != std::string::npos) {
    text.resize(cut);
    stopped = true;
  }
  const int64_t prompt = static_cast<int64_t>(r.prompt_tokens.size()), completion = static_cast<int64_t>(res.output_tokens.size());
  json choice{{"index", 0}, {"finish_reason", stopped ? "stop" : "length"}, {"logprobs", nullptr}};
  json body{{"created", created}, {"model", oa.model}};
  if (oa.chat) {
    body["id"] = "chatcmpl-" + h;
    body["object"] = "chat.completion";
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    if (split) {
      const ReasoningSplit s = split_reasoning(text, oa.prompt_opens_think);
      choice["message"]["content"] = s.content;
      choice["message"]["reasoning_content"] = s.reasoning.empty() ? json(nullptr) : json(s.reasoning);
    }
    if (res.has_logprobs) choice["logprobs"] = chat_logprobs(res, token_texts);
  } else {
    body["id"] = "cmpl-" + h;
    body["object"] = "text_completion";
    choice["text"] = oa.echo ? r.prompt_text + text : text;
    if (res.has_logprobs) choice["logprobs"] = completion_logprobs(res, token_texts);
  }
  body["choices"] = json::array({std::move(choice)});
  body["usage"] = {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
  out["response"] = {{"status_code", 200}, {"request_id", "req_" + h}, {"body", std::move(body)}};
  out["error"] = nullptr;
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace moerun::io

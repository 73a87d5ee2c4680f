// OpenAI Batch API files (docs/FORMATS.md, "OpenAI batch files"): an input of one request a line,
// {"custom_id", "method": "POST", "url": "/v1/chat/completions" | "/v1/completions", "body": {...}},
// read into moerun's requests; and the output the API writes, one line per input line in input
// order: {"id", "custom_id", "response": {"status_code": 200, "request_id", "body"}, "error": null},
// or for a line that cannot run {"id", "custom_id", "response": null, "error": {"code", "message"}}.
// A file is in this format when its first line has "custom_id" and "body".
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/requests.hpp"

namespace moerun::io {

// What an OpenAI request carries beyond moerun's request (Request::openai).
struct OpenAiRequest {
  bool chat = false;  // /v1/chat/completions (else /v1/completions)
  std::string custom_id;
  std::string model;  // body.model, echoed back
  std::string messages;  // chat: body.messages as JSON text, for the chat template
  std::string template_kwargs;  // chat: body.chat_template_kwargs as a JSON object's text ("{}")
  std::string chat_template;  // chat: body.chat_template, a template's name or text ("": the default)
  std::vector<std::string> stop;  // body.stop: the output is cut before the first match
  bool echo = false;  // completions: the prompt's text before the completion
  bool prompt_opens_think = false;  // chat: the rendered prompt ends inside <think> (a thinking template)
};

// Whether `text` (a whole input file) is an OpenAI batch file.
bool is_openai_batch(const std::string& text);

// Every line of an OpenAI batch file as a request: its custom_id is the request id, its errors (a
// malformed line, a field out of range, an unsupported feature such as n > 1, tools or images) are
// the request's `error`, never the end of the job. Field names the request carries but moerun does
// not use are added to `ignored` (the caller warns once per name).
std::vector<Request> parse_openai_batch(const std::string& text, const std::string& path, const RequestDefaults& defaults,
                                        const RequestLimits& limits, std::set<std::string>& ignored);

// A chat request's prompt, as the model's chat template renders it and the tokenizer encodes it.
struct ChatPrompt {
  std::string messages;  // JSON array
  std::string template_kwargs;  // JSON object
  std::string chat_template;  // one of the model's templates by name, or a template's text; "": the default
};
struct ChatTokens {
  std::vector<int32_t> ids;
  std::string error;  // non-empty: the template refused it (raise_exception) or could not render it
  bool opens_think = false;  // the rendered text ends with an open <think> (the model continues its reasoning)
};
// Fills prompt_tokens of the chat requests (`render` takes every conversation at once) and checks
// them as tokenize_prompts checks text prompts; a failure is that request's error.
void render_chat_prompts(std::vector<Request>& requests, const RequestLimits& limits,
                         const std::function<std::vector<ChatTokens>(const std::vector<ChatPrompt>&)>& render);

// The output line of request `r` with result `res` (its text decoded): a chat.completion or
// text_completion body, the output cut before the first stop string (finish_reason "stop"), or
// the error object. `created` is the Unix time the bodies carry; `token_texts` each log-prob
// token's text (its id decoded alone).
std::string openai_result_line(const Request& r, const Result& res, int64_t created,
                               const std::unordered_map<int32_t, std::string>& token_texts, bool split_reasoning = false);

// A thinking model's chat text split as vLLM's reasoning parsers split it: the reasoning up to the
// first </think> (a leading <think> dropped), the content after it (leading newlines dropped).
// Without </think>: all reasoning if the text opened <think> or the prompt did (the budget ran out
// while thinking), else all content.
struct ReasoningSplit {
  std::string reasoning, content;
};
ReasoningSplit split_reasoning(const std::string& text, bool prompt_opens_think);

}  // namespace moerun::io

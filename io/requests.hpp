// Requests and results in JSON Lines (DESIGN §3). The whole input is validated before any work:
// a bad line is a BadInput error naming the file and line, or (skip_invalid) a request carrying
// its error, reported as a result with an "error" field.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moerun::io {

struct OpenAiRequest;  // io/openai_batch.hpp

// Sampling beyond temperature and top-p: OpenAI's and vLLM's fields, each neutral by default. They
// act on the logits a request samples from (greedy included); its log-probs stay the model's.
struct SamplingFields {
  int64_t top_k = 0;  // keep the k most probable tokens (0: all)
  double min_p = 0;  // drop tokens less probable than min_p x the most probable one
  double presence_penalty = 0;  // subtracted once from the logit of each token the output holds
  double frequency_penalty = 0;  // subtracted per time the output holds the token
  double repetition_penalty = 1;  // a prompt or output token's logit: divided by it if > 0, else multiplied
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to those tokens' logits (ids ascending)
  bool neutral() const {
    return top_k == 0 && min_p == 0 && presence_penalty == 0 && frequency_penalty == 0 && repetition_penalty == 1 && logit_bias.empty();
  }
};

struct Request {
  std::string id;
  std::vector<int32_t> prompt_tokens;  // given, or (has_text) from tokenize_prompts
  bool has_text = false;  // the request gave "prompt" text; its result gets "text"
  std::string prompt_text;
  int64_t max_new_tokens = 0;
  double temperature = 0.0;
  double top_p = 1.0;
  uint64_t seed = 0;
  SamplingFields sampling{};
  // Scoring (docs/FORMATS.md): the top-K alternatives returned with the log-probability of every
  // generated token (logprobs) and of every prompt token from score_from on (prompt_logprobs);
  // -1: not asked. score_from is 1 for a JSONL request; perplexity windows score their second half.
  int64_t logprobs = -1;
  int64_t prompt_logprobs = -1;
  int64_t score_from = 1;
  int64_t line = 0;  // 1-based line in the input file
  std::string error;  // non-empty: invalid, skipped (only with skip_invalid)
  std::shared_ptr<const OpenAiRequest> openai{};  // a line of an OpenAI batch file: what it adds
  // Generation ends once the generated text holds one of these (matched on the tokens' bytes as
  // they are sampled; SchedulerConfig::token_bytes); the output text is cut before it.
  std::vector<std::string> stop{};
};

struct RequestDefaults {
  int64_t max_new_tokens = 32;
  double temperature = 0.0;
  double top_p = 1.0;
  uint64_t seed = 0;
};

struct RequestLimits {
  int64_t vocab_size = 0;
  int64_t max_position = 0;
};

// Every line of `path`, in order. Ids are claimed in input order: a later line repeating an id is
// invalid. With skip_invalid, invalid lines come back with `error` set and keep their own id when
// it parsed and is unclaimed, else "line:N" (made unique); without, the first one throws BadInput
// naming the file and line. max_new_tokens is capped at max_position - prompt length (where
// generation stops anyway).
std::vector<Request> read_requests(const std::string& path, const RequestDefaults& defaults, const RequestLimits& limits,
                                   bool skip_invalid);
// The two halves of read_requests, for a job where one rank reads the input (a FIFO or a pipe can
// be read only once) and every rank parses the same text. `path` names the file in messages.
std::string read_requests_text(const std::string& path);
std::vector<Request> parse_requests(const std::string& text, const std::string& path, const RequestDefaults& defaults,
                                    const RequestLimits& limits, bool skip_invalid);
// parse_requests' two steps, for another line format (io/openai_batch): one line of moerun's format
// (the request, or with `error` set the id found and why it is invalid; never throws for the
// line's content), and the walk over a file's lines with any such per-line parser (blank lines
// skipped, ids claimed in input order, invalid lines without an id given "line:N").
Request parse_request_line(const std::string& text, int64_t line, const RequestDefaults& defaults, const RequestLimits& limits);
std::vector<Request> parse_lines(const std::string& text, const std::string& path, bool skip_invalid,
                                 const std::function<Request(const std::string&, int64_t)>& parse_line);

// Fills prompt_tokens of the requests that gave "prompt" text (`encode` takes all texts at once),
// then checks them as given tokens are checked (range, max_position) and caps their budget. A
// failure is BadInput naming `path` and the line, or, with skip_invalid, that request's error.
void tokenize_prompts(std::vector<Request>& requests, const std::string& path, const RequestLimits& limits, bool skip_invalid,
                      const std::function<std::vector<std::vector<int32_t>>(const std::vector<std::string>&)>& encode);
bool any_text_prompt(const std::vector<Request>& requests);

// xxh64 of everything in the request that decides its result (id, prompt, budget, sampling):
// journal entries carry it so that --resume never takes a result made for another request.
uint64_t request_fingerprint(const Request& r);

// The log-probability of one token (log_softmax of the model's logits, in float64) and the top-K
// tokens of the same distribution, most probable first (ties: lower id first).
struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0;
  std::vector<std::pair<int32_t, double>> top;
};

struct Result {
  std::string id;
  std::vector<int32_t> output_tokens;
  std::string finish_reason;  // "length" | "eos"
  int64_t prompt_len = 0;
  std::string error;  // set for requests rejected with --skip-invalid
  std::string key{};  // journal entries only: what the result was computed from (JournalKeys)
  bool has_text = false;  // the output line carries "text" (the output tokens decoded)
  std::string text{};
  bool has_prompt_logprobs = false;  // the request asked for them (even when there are none)
  std::vector<TokenLogprob> prompt_logprobs{};  // prompt tokens score_from.. (one per token)
  bool has_logprobs = false;
  std::vector<TokenLogprob> logprobs{};  // one per output token
};

// One JSON line; `key` is written only when with_key (journals; the output format has no key).
std::string result_to_json(const Result& r, bool with_key = false);
// Parses one result line; returns false on a malformed (e.g. torn) line.
bool result_from_json(const std::string& line, Result* out);

}  // namespace moerun::io

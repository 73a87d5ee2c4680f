// io/openai_batch: OpenAI batch lines into requests (errors per line), and the output lines, with
// the reasoning split. The end to end test with real templates is tests/integration/openai_batch.py.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/openai_batch.hpp"

namespace moerun::io {
namespace {

using nlohmann::json;

const RequestLimits kLimits{1000, 512};

std::vector<Request> parse(const std::vector<std::string>& lines, std::set<std::string>* ignored = nullptr) {
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  std::set<std::string> seen;
  auto r = parse_openai_batch(text, "batch.jsonl", RequestDefaults{}, kLimits, seen);
  if (ignored) *ignored = seen;
  return r;
}

TEST(OpenAiBatch, DetectsTheFormatByItsFirstLine) {
  EXPECT_TRUE(is_openai_batch("\n{\"custom_id\": \"a\", \"body\": {}}\n"));
  EXPECT_FALSE(is_openai_batch("{\"id\": \"a\", \"prompt\": \"x\"}\n"));
  EXPECT_FALSE(is_openai_batch("not json\n"));
}

TEST(OpenAiBatch, ReadsChatAndCompletionBodies) {
  std::set<std::string> ignored;
  const auto r = parse(
      {R"({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", )"
       R"("messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 7, "temperature": 0.5, )"
       R"("stop": "###", "logprobs": true, "top_logprobs": 3, "user": "u", "metadata": {}}})",
       R"({"custom_id": "p", "method": "POST", "url": "/v1/completions", "body": {"prompt": [5, 6, 7], "max_tokens": 4, "echo": true}})"},
      &ignored);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].error, "");
  EXPECT_EQ(r[0].id, "c");
  EXPECT_TRUE(r[0].openai->chat);
  EXPECT_EQ(r[0].max_new_tokens, 7);
  EXPECT_EQ(r[0].temperature, 0.5);
  EXPECT_EQ(r[0].logprobs, 3);
  EXPECT_EQ(r[0].openai->stop, std::vector<std::string>{"###"});
  EXPECT_EQ(json::parse(r[0].openai->messages)[0]["content"], "hi");
  EXPECT_TRUE(r[0].prompt_text.empty()) << "a chat prompt comes from the template";
  EXPECT_EQ(ignored, (std::set<std::string>{"metadata", "user"}));
  EXPECT_EQ(r[1].error, "");
  EXPECT_EQ(r[1].prompt_tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_TRUE(r[1].openai->echo);
}

TEST(OpenAiBatch, ChatTemplateByNameOrText) {
  auto line = [](const char* id, const char* pick) {
    return std::string(R"({"custom_id": ")") + id + R"(", "method": "POST", "url": "/v1/chat/completions", )" +
           R"("body": {"messages": [{"role": "user", "content": "x"}], "chat_template": )" + pick + "}}";
  };
  const auto r = parse({line("a", R"("rag")"), line("b", "null"), line("c", "3")});
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].error, "");
  EXPECT_EQ(r[0].openai->chat_template, "rag");
  EXPECT_EQ(r[1].error, "");
  EXPECT_EQ(r[1].openai->chat_template, "") << "null: the model's default";
  EXPECT_NE(r[2].error.find("body.chat_template"), std::string::npos) << r[2].error;
}

TEST(OpenAiBatch, EveryBadLineIsItsOwnError) {
  const auto r = parse(
      {"{oops",
       R"({"custom_id": "n", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "x"}], "n": 2}})",
       R"({"custom_id": "t", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}})",
       R"({"custom_id": "e", "method": "POST", "url": "/v1/embeddings", "body": {}})",
       R"({"custom_id": "v", "method": "POST", "url": "/v1/completions", "body": {"prompt": [5000]}})",
       R"({"custom_id": "ok", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x"}})",
       R"({"custom_id": "ok", "method": "POST", "url": "/v1/completions", "body": {"prompt": "y"}})"});
  ASSERT_EQ(r.size(), 7u);
  EXPECT_NE(r[0].error.find("not valid JSON"), std::string::npos) << r[0].error;
  EXPECT_NE(r[1].error.find("body.n is 2"), std::string::npos) << r[1].error;
  EXPECT_NE(r[2].error.find("tool calls are not supported"), std::string::npos) << r[2].error;
  EXPECT_NE(r[3].error.find("/v1/embeddings"), std::string::npos) << r[3].error;
  EXPECT_NE(r[4].error.find("out of range"), std::string::npos) << r[4].error;
  EXPECT_EQ(r[5].error, "");
  EXPECT_NE(r[6].error.find("repeats line 6"), std::string::npos) << r[6].error;
  EXPECT_EQ(r[6].openai->custom_id, "ok") << "the output keeps the line's custom_id";
}

TEST(OpenAiBatch, OutputLinesInTheApiShape) {
  auto r = parse({R"({"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", )"
                  R"("messages": [{"role": "user", "content": "hi"}], "stop": ["STOP", "END"]}})"});
  r[0].prompt_tokens = {1, 2, 3};
  Result res;
  res.id = "c";
  res.output_tokens = {7, 8, 9, 10};
  res.finish_reason = "length";
  res.text = "Paris END. STOP later";
  const json j = json::parse(openai_result_line(r[0], res, 1700000000, {}));
  EXPECT_EQ(j["custom_id"], "c");
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["response"]["status_code"], 200);
  const json& b = j["response"]["body"];
  EXPECT_EQ(b["object"], "chat.completion");
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["created"], 1700000000);
  EXPECT_EQ(b["choices"][0]["message"]["content"], "Paris ") << "cut before the first match of any stop string";
  EXPECT_EQ(b["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(b["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(b["usage"]["completion_tokens"], 4);
  EXPECT_EQ(b["usage"]["total_tokens"], 7);
  Result failed = res;
  failed.error = "non-finite values in layer 3";
  const json e = json::parse(openai_result_line(r[0], failed, 0, {}));
  EXPECT_TRUE(e["response"].is_null());
  EXPECT_EQ(e["error"]["code"], "server_error");
}

TEST(OpenAiBatch, ReasoningSplitsAsTheThinkParsersDo) {
  auto check = [](const std::string& text, bool opens, const std::string& reasoning, const std::string& content) {
    const ReasoningSplit s = split_reasoning(text, opens);
    EXPECT_EQ(s.reasoning, reasoning) << text;
    EXPECT_EQ(s.content, content) << text;
  };
  check("<think>step 1</think>\n\nThe answer", false, "step 1", "The answer");
  check("step 1</think>The answer", true, "step 1", "The answer");  // the template opened <think>
  check("still thinking", true, "still thinking", "");  // the budget ran out inside
  check("<think>still thinking", false, "still thinking", "");
  check("A plain answer", false, "", "A plain answer");  // no thinking at all
  check("\n<think></think>\n\nAnswer", false, "", "Answer");
}

// A chat and a completions line with `extra` body fields after its prompt.
std::string chat_line(const std::string& id, const std::string& extra) {
  return R"({"custom_id": ")" + id +
         R"(", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "user", "content": "x"}])" + extra + "}}";
}
std::string completion_line(const std::string& id, const std::string& extra) {
  return R"({"custom_id": ")" + id + R"(", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x")" + extra + "}}";
}

// A request whose error holds `text`.
void expect_error(const Request& r, const std::string& text) {
  EXPECT_NE(r.error.find(text), std::string::npos) << r.id << ": " << r.error;
}

// Issue 77: fields typed as the API types them, errors naming the line's own field.
TEST(OpenAiBatch, MistypedFieldsAreErrorsNamingTheLinesField) {
  const auto r = parse({chat_line("lp5", R"(, "logprobs": 5)"), chat_line("top-alone", R"(, "top_logprobs": 2)"),
                        chat_line("top-false", R"(, "logprobs": false, "top_logprobs": 2)"),
                        chat_line("top-big", R"(, "logprobs": true, "top_logprobs": 21)"), chat_line("echo", R"(, "echo": true)"),
                        chat_line("budget", R"(, "max_tokens": -3)"), chat_line("budget2", R"(, "max_completion_tokens": "7")"),
                        completion_line("lp-true", R"(, "logprobs": true)"), completion_line("lp-9", R"(, "logprobs": 9)"),
                        completion_line("top", R"(, "top_logprobs": 2)"), completion_line("temp", R"(, "temperature": "hot")"),
                        chat_line("ok", R"(, "logprobs": true, "top_logprobs": 2)")});
  ASSERT_EQ(r.size(), 12u);
  expect_error(r[0], "field body.logprobs is 5: chat takes true or false");
  expect_error(r[1], "field body.top_logprobs is set, but body.logprobs is not true");
  expect_error(r[2], "field body.top_logprobs is set, but body.logprobs is not true");
  expect_error(r[3], "field body.top_logprobs is 21: an integer in [0, 20]");
  expect_error(r[4], "field body.echo is set: it is a /v1/completions field");
  expect_error(r[5], "field body.max_tokens is -3");
  expect_error(r[6], "field body.max_completion_tokens is not an integer");
  expect_error(r[7], "field body.logprobs is true: /v1/completions takes an integer in [0, 5]");
  expect_error(r[8], "field body.logprobs is 9");
  expect_error(r[9], "field body.top_logprobs is a chat field");
  expect_error(r[10], "field body.temperature is not a number");
  EXPECT_EQ(r[11].error, "");
  EXPECT_EQ(r[11].logprobs, 2);
}

// The sampling fields a batch line may carry (issue 79): read, ranged, errors naming the body's field.
TEST(OpenAiBatch, SamplingFieldsAreReadAndChecked) {
  const auto r = parse(
      {completion_line(
           "all",
           R"(, "top_k": 5, "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.2, "logit_bias": {"7": -100, "3": 2.5})"),
       completion_line("off", R"(, "top_k": -1, "presence_penalty": 0, "logit_bias": {})"), completion_line("k", R"(, "top_k": -2)"),
       completion_line("mp", R"(, "min_p": 1.5)"), completion_line("pp", R"(, "presence_penalty": 3)"),
       completion_line("rp", R"(, "repetition_penalty": 0)"), completion_line("lb-id", R"(, "logit_bias": {"1000": 1})"),
       completion_line("lb-key", R"(, "logit_bias": {"x": 1})"), completion_line("lb-val", R"(, "logit_bias": {"5": 101})")});
  ASSERT_EQ(r.size(), 9u);
  EXPECT_EQ(r[0].error, "");
  EXPECT_EQ(r[0].sampling.top_k, 5);
  EXPECT_DOUBLE_EQ(r[0].sampling.min_p, 0.1);
  EXPECT_DOUBLE_EQ(r[0].sampling.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(r[0].sampling.frequency_penalty, -0.5);
  EXPECT_DOUBLE_EQ(r[0].sampling.repetition_penalty, 1.2);
  EXPECT_EQ(r[0].sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{3, 2.5f}, {7, -100.0f}}));
  EXPECT_EQ(r[1].error, "");
  EXPECT_TRUE(r[1].sampling.neutral());
  EXPECT_NE(request_fingerprint(r[0]), request_fingerprint(r[1]));
  expect_error(r[2], "field body.top_k is -2");
  expect_error(r[3], "field body.min_p is 1.5, expected in [0, 1]");
  expect_error(r[4], "field body.presence_penalty is 3");
  expect_error(r[5], "field body.repetition_penalty is 0");
  expect_error(r[6], "field body.logit_bias has key \"1000\", not a token id in [0, 1000)");
  expect_error(r[7], "field body.logit_bias has key \"x\"");
  expect_error(r[8], "field body.logit_bias[\"5\"] is 101");
}

}  // namespace
}  // namespace moerun::io

// Bounded, seeded fuzz test of the request parsers (io/requests, io/openai_batch). Mutates valid JSONL request
// files (byte edits, numbers at and past the limits of their types, repeated and colliding ids,
// deep nesting, broken UTF-8) and parses each mutant in both modes. The parser must never crash
// (run under ASan and UBSan in CI), never throw anything but a BadInput error naming the file and
// line, and with --skip-invalid give one request per non-blank line, with unique ids, valid
// requests in range. OpenAI batch files likewise: never a throw, one request per line.
// usage: fuzz_requests [--seconds S] [--seed N] [--iterations N]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "io/openai_batch.hpp"
#include "io/requests.hpp"

namespace {

using moerun::Error;
using moerun::ErrorKind;

const std::vector<std::string> kSeeds = {
    R"({"id": "q1", "prompt_tokens": [1, 42, 7], "max_new_tokens": 32, "temperature": 0, "seed": 0})",
    R"({"id": "q2", "prompt_tokens": [5], "top_p": 0.9, "temperature": 0.7, "seed": 12345678901234})",
    R"({"id": 17, "prompt_tokens": [0, 99, 3, 3, 3], "max_new_tokens": null})",
    R"({"id": "line:3", "prompt_tokens": [2, 2]})",
    R"({"prompt_tokens": [1], "id": "ü-ñ"})",
};
const std::vector<std::string> kOpenAiSeeds = {
    R"({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stop": ["x", "y"], "logprobs": true, "top_logprobs": 2}})",
    R"({"custom_id": "b", "method": "POST", "url": "/v1/completions", "body": {"prompt": [1, 2, 3], "max_tokens": 4, "echo": true, "n": 1, "temperature": 0.5}})",
    R"({"custom_id": "c", "method": "POST", "url": "/v1/completions", "body": {"prompt": "text", "logprobs": 3, "stop": "z", "seed": 7}})",
    R"({"custom_id": "d", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": [{"role": "system", "content": [{"type": "text", "text": "t"}]}], "chat_template_kwargs": {"enable_thinking": false}}})",
};
const std::vector<std::string> kTokens = {
    "1e999",
    "-1e999",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "-9223372036854775808",
    "0",
    "-1",
    "99",
    "100",
    "1e-400",
    "NaN",
    "Infinity",
    "null",
    "true",
    "\"\"",
    "[]",
    "{}",
    "[[[[[[[[]]]]]]]]",
    "\"q1\"",
    "\"line:1\"",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\xff\xfe",
    "\"\xc3\x28\"",
    ",",
    ":",
    "\"id\"",
    "\"prompt_tokens\"",
    "\"max_new_tokens\"",
    "\"temperature\"",
    "\"top_p\"",
    "\"seed\"",
    "\n",
    "\r\n",
    " ",
    std::string(300, '['),
    "0.5",
    "1.0000000000000002",
    "4294967296",
};

std::string mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n ? n : 1)); };
  const int edits = 1 + static_cast<int>(rng() % 5);
  for (int i = 0; i < edits; ++i) {
    const std::size_t at = pick(s.size() + 1);
    switch (rng() % 6) {
      case 0:
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng() & 0xff);
        break;
      case 1: s.insert(at, kTokens[pick(kTokens.size())]); break;
      case 2:
        if (!s.empty()) s.erase(at < s.size() ? at : s.size() - 1, 1 + pick(8));
        break;
      case 3: {  // replace a number with a token
        const std::size_t d = s.find_first_of("0123456789", at);
        if (d != std::string::npos) {
          std::size_t e = d;
          while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
          s.replace(d, e - d, kTokens[pick(kTokens.size())]);
        }
        break;
      }
      case 4: s.insert(at, s.substr(pick(s.size()), 1 + pick(16))); break;
      default: s.insert(at, std::string(1 + pick(3), static_cast<char>(rng() & 0x7f))); break;
    }
  }
  return s;
}

int failures = 0;
void problem(const std::string& what, const std::string& file) {
  ++failures;
  std::fprintf(stderr, "FAIL %s\n--- input ---\n", what.c_str());
  std::ifstream in(file);
  std::fprintf(stderr, "%s\n-------------\n", std::string((std::istreambuf_iterator<char>(in)), {}).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 60;
  uint64_t seed = 1;
  long iterations = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds"))
      seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seed"))
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--iterations"))
      iterations = std::atol(argv[i + 1]);
  }
  const std::string dir = std::filesystem::temp_directory_path() / ("moerun-fuzz-req-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/in.jsonl";
  std::mt19937_64 rng(seed);
  const moerun::io::RequestLimits lim{100, 64};
  moerun::io::RequestDefaults defaults;
  const auto start = std::chrono::steady_clock::now();
  long n = 0, valid_lines = 0, invalid_lines = 0;
  while (iterations < 0 ? std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds : n < iterations) {
    ++n;
    std::string text;
    const int lines = 1 + static_cast<int>(rng() % 6);
    for (int l = 0; l < lines; ++l) {
      std::string line = kSeeds[rng() % kSeeds.size()];
      if (rng() % 4 != 0) line = mutate(line, rng);
      text += line + "\n";
    }
    { std::ofstream(path, std::ios::binary) << text; }
    int64_t nonblank = 0;
    {
      std::ifstream in(path);
      for (std::string l; std::getline(in, l);) nonblank += l.find_first_not_of(" \t\r") != std::string::npos;
    }
    // Strict mode: all good, or one BadInput naming the file and a line.
    try {
      auto rs = moerun::io::read_requests(path, defaults, lim, false);
      if (static_cast<int64_t>(rs.size()) != nonblank) problem("strict: request count differs from non-blank lines", path);
    } catch (const Error& e) {
      const std::string m = e.what();
      if (e.kind() != ErrorKind::BadInput || m.rfind(path + ": line ", 0) != 0) problem("strict: unexpected error: " + m, path);
    } catch (const std::exception& e) {
      problem(std::string("strict: foreign exception: ") + e.what(), path);
    }
    // --skip-invalid: one result per line, unique ids, valid ones in range.
    try {
      auto rs = moerun::io::read_requests(path, defaults, lim, true);
      if (static_cast<int64_t>(rs.size()) != nonblank) problem("skip: request count differs from non-blank lines", path);
      std::set<std::string> ids;
      for (const auto& r : rs) {
        if (r.id.empty() || !ids.insert(r.id).second) problem("skip: empty or repeated id " + r.id, path);
        if (!r.error.empty()) {
          ++invalid_lines;
          continue;
        }
        ++valid_lines;
        // A text prompt is tokenized later (routers, io::tokenize_prompts), where its length and
        // max_new_tokens are checked and capped; here it has its text and no tokens yet.
        const bool tokens_ok = r.has_text ? r.prompt_tokens.empty() && !r.prompt_text.empty()
                                          : !r.prompt_tokens.empty() && static_cast<int64_t>(r.prompt_tokens.size()) < lim.max_position &&
                                                r.max_new_tokens + static_cast<int64_t>(r.prompt_tokens.size()) <= lim.max_position;
        bool ok = tokens_ok && r.max_new_tokens >= 0 && r.temperature >= 0 && r.top_p > 0 && r.top_p <= 1;
        for (int32_t t : r.prompt_tokens) ok = ok && t >= 0 && t < lim.vocab_size;
        if (!ok) problem("skip: a valid request out of range: " + r.id, path);
      }
    } catch (const std::exception& e) {
      problem(std::string("skip: threw: ") + e.what(), path);
    }
    // The same kind of file in the OpenAI batch format: never a throw, one request per line,
    // unique ids, each valid one with its custom_id and a prompt (chat: none until the template).
    {
      std::string otext;
      for (int l = 0; l < lines; ++l) {
        std::string line = kOpenAiSeeds[rng() % kOpenAiSeeds.size()];
        if (rng() % 4 != 0) line = mutate(line, rng);
        otext += line + "\n";
      }
      int64_t olines = 0;
      std::istringstream oin(otext);
      for (std::string l; std::getline(oin, l);) olines += l.find_first_not_of(" \t\r") != std::string::npos;
      try {
        std::set<std::string> ignored;
        auto rs = moerun::io::parse_openai_batch(otext, path, defaults, lim, ignored);
        if (static_cast<int64_t>(rs.size()) != olines) problem("openai: request count differs from non-blank lines", path);
        std::set<std::string> ids;
        for (const auto& r : rs) {
          if (r.id.empty() || !ids.insert(r.id).second) problem("openai: empty or repeated id " + r.id, path);
          if (!r.openai) problem("openai: a request without its OpenAI fields", path);
          if (r.error.empty() && r.openai && !r.openai->chat && r.prompt_tokens.empty() && r.prompt_text.empty())
            problem("openai: a valid completion without a prompt", path);
        }
      } catch (const std::exception& e) {
        problem(std::string("openai: threw: ") + e.what(), path);
      }
    }
    if (failures > 10) break;
  }
  std::filesystem::remove_all(dir);
  std::printf("fuzz_requests: seed %llu, %ld files in %.0f s: %ld valid and %ld invalid lines, %d failures\n",
              static_cast<unsigned long long>(seed), n, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              valid_lines, invalid_lines, failures);
  return failures ? 1 : 0;
}

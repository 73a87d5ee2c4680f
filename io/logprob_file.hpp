// Saved log-probabilities (`moerun perplexity --save-logits FILE`): the full-vocabulary log-softmax
// of every scored position of a text, so that a later run (another model, a quantized or converted
// copy) can be judged against them with --kl-base. Router 0 writes FILE, router N > 0 FILE.N; all
// parts of one run share run_id, so stale parts of an earlier run are never mixed in.
//   attrs: format="moe-logprobs", format_version=1, vocab_size, context, stride, num_tokens,
//          tokens_xxh64, run_id, part, parts, rows, model (informational)
//   /tokens    [num_tokens] int32        the scored text's tokens (every part holds them)
//   /positions [rows] int64              the token each row predicts (its index in /tokens)
//   /logprobs  [rows, vocab_size] float32, chunked by row
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace moerun::io {

struct LogprobHeader {
  int64_t vocab_size = 0;
  int64_t context = 0;
  int64_t stride = 0;
  int64_t num_tokens = 0;
  uint64_t tokens_xxh64 = 0;
  uint64_t run_id = 0;
  int64_t part = 0, parts = 1;
  std::string model;
};

// One part, written to a temp file and renamed into place by finish() (an unfinished writer
// leaves nothing). Rows are written as they come, in any order of positions.
class LogprobWriter {
 public:
  LogprobWriter(const std::string& path, const LogprobHeader& header, const std::vector<int32_t>& tokens);
  ~LogprobWriter();
  LogprobWriter(const LogprobWriter&) = delete;
  LogprobWriter& operator=(const LogprobWriter&) = delete;
  void append(int64_t position, const float* logprobs);  // one row [vocab_size]
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The parts of a saved run (FILE and FILE.1 .. FILE.{parts-1}), rows looked up by position.
// BadInput naming the file and field for a file that is not a moe-logprobs file or whose parts
// disagree.
class LogprobBase {
 public:
  explicit LogprobBase(const std::string& path);
  ~LogprobBase();
  const LogprobHeader& header() const { return header_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  bool has(int64_t position) const { return where_.count(position) > 0; }
  // The saved row predicting token `position` into out [vocab_size]; BadInput when none was saved.
  void read(int64_t position, float* out) const;

 private:
  struct Part;
  std::string path_;
  LogprobHeader header_;
  std::vector<int32_t> tokens_;
  std::vector<std::unique_ptr<Part>> parts_;
  std::unordered_map<int64_t, std::pair<int, int64_t>> where_;  // position -> (part, row)
};

// xxh64 of a token list (the tokenization a saved run was made from).
uint64_t tokens_fingerprint(const std::vector<int32_t>& tokens);

}  // namespace moerun::io

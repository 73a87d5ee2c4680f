// Progress on stderr for long runs: requests done/total, prompt and generated tokens per second of
// wall time since serving began (the summary's prefill and decode rates are per second of the steps
// of each kind, so they are higher: each counts only its own steps), ETA. On a
// terminal one line rewritten in place (twice a second); otherwise a line every 10 s. --quiet
// silences it.
#pragma once
#include <chrono>
#include <cstdint>

namespace moerun::runtime {

class Progress {
 public:
  // `token_budget`: prompt + max_new_tokens over all requests, the ETA's denominator (requests that
  // end at EOS finish early; the ETA errs long, never short).
  Progress(int64_t total_requests, int64_t token_budget, bool quiet);
  void update(int64_t done_requests, int64_t prompt_tokens, int64_t generated_tokens);
  void finish(int64_t done_requests, int64_t prompt_tokens, int64_t generated_tokens);
  double elapsed() const;

 private:
  void print(int64_t done, int64_t prompt, int64_t generated, bool final);
  int64_t total_, budget_;
  bool quiet_, tty_;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t last_done_ = -1, last_tokens_ = -1;
  bool shown_ = false;
};

}  // namespace moerun::runtime

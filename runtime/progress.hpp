// Progress line on stderr for long runs (requests done/total, tokens/s, ETA), at most once a second,
// silenced by --quiet.
#pragma once
#include <chrono>
#include <cstdint>

namespace moerun::runtime {

class Progress {
 public:
  Progress(int64_t total_requests, bool quiet);
  void update(int64_t done_requests, int64_t tokens);
  void finish(int64_t done_requests, int64_t tokens);
  double elapsed() const;

 private:
  void print(int64_t done, int64_t tokens);
  int64_t total_;
  bool quiet_;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t last_done_ = -1, last_tokens_ = -1;
};

}  // namespace moerun::runtime

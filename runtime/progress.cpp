// Progress reporting.
#include "runtime/progress.hpp"

#include <cstdio>

namespace moerun::runtime {

Progress::Progress(int64_t total, bool quiet)
    : total_(total), quiet_(quiet), start_(std::chrono::steady_clock::now()), last_(start_) {}

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int64_t done, int64_t tokens) {
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::seconds(1)) return;
  last_ = now;
  print(done, tokens);
}

void Progress::finish(int64_t done, int64_t tokens) {
  if (done != last_done_ || tokens != last_tokens_) print(done, tokens);
}

void Progress::print(int64_t done, int64_t tokens) {
  last_done_ = done;
  last_tokens_ = tokens;
  if (quiet_) return;
  const double t = elapsed();
  const double rate = t > 0 ? static_cast<double>(tokens) / t : 0;
  const double eta = done > 0 ? t * static_cast<double>(total_ - done) / static_cast<double>(done) : 0;
  std::fprintf(stderr, "moerun: %lld/%lld requests, %lld tokens, %.1f tokens/s, ETA %.0f s\n",
               static_cast<long long>(done), static_cast<long long>(total_), static_cast<long long>(tokens), rate, eta);
  std::fflush(stderr);
}

}  // namespace moerun::runtime

// Progress reporting.
#include "runtime/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace moerun::runtime {

Progress::Progress(int64_t total, int64_t budget, bool quiet)
    : total_(total),
      budget_(budget),
      quiet_(quiet),
      tty_(::isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

double Progress::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Progress::update(int64_t done, int64_t prompt, int64_t generated) {
  auto now = std::chrono::steady_clock::now();
  if (now - last_ < (tty_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(10000))) return;
  last_ = now;
  print(done, prompt, generated, false);
}

void Progress::finish(int64_t done, int64_t prompt, int64_t generated) {
  if (done != last_done_ || prompt + generated != last_tokens_)
    print(done, prompt, generated, true);
  else if (shown_ && tty_ && !quiet_)
    std::fputc('\n', stderr);
}

void Progress::print(int64_t done, int64_t prompt, int64_t generated, bool final) {
  last_done_ = done;
  last_tokens_ = prompt + generated;
  if (quiet_) return;
  const double t = elapsed();
  const double tokens = static_cast<double>(prompt + generated);
  const double eta = tokens > 0 && budget_ > 0 ? t * std::max(0.0, static_cast<double>(budget_) - tokens) / tokens : 0;
  // Rates of wall time since serving began; the summary's prefill/decode rates are of step time.
  std::fprintf(stderr, "%smoerun: %lld/%lld requests, prompt %.1f tokens/s, generated %.1f tokens/s (of %.1f s wall time), ETA %.0f s%s",
               tty_ ? "\r" : "", static_cast<long long>(done), static_cast<long long>(total_),
               t > 0 ? static_cast<double>(prompt) / t : 0.0, t > 0 ? static_cast<double>(generated) / t : 0.0, t, final ? 0.0 : eta,
               tty_ && !final ? "   " : "\n");
  std::fflush(stderr);
  shown_ = true;
}

}  // namespace moerun::runtime

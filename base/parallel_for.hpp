// parallel_for: a loop on the OpenMP team when it is worth one, else inline. An `if`-false OpenMP
// region is not free: libgomp still starts a team of one and ends it with a futex wake, and inside
// another region it builds a new team each time. A one-sequence decode step runs dozens of loops
// too small to split (perf: ~2% of its time in those futex calls and team set-ups).
#pragma once
#include <omp.h>

#include <cstdint>

namespace moerun {

// fn(i) for i in [0, n): split statically over the team when `worth_it` and not already inside a
// region. Each i runs the same code either way, so the results are the same bits.
template <class Fn>
void parallel_for(int64_t n, bool worth_it, Fn&& fn) {
  if (!worth_it || n < 2 || omp_in_parallel()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) fn(i);
}

}  // namespace moerun

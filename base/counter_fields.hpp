// Counters declared once. A counter struct lists its fields in one table: the name (the key in
// --stats-json) and how the field combines across ranks (summed, the maximum, or the earliest
// time). Adding two structs, the cross-rank reduction (comm/counter_reduction.hpp) and the JSON
// (runtime/stats_json.hpp) are derived from that table, so a new counter is one line in it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace moerun {

enum class Combine {
  Sum,
  Max,
  Earliest,  // a time, -1 when none: the smallest non-negative value
};

template <typename S>
struct CounterField {
  const char* name;
  int64_t S::*i = nullptr;  // one of the two is set
  double S::*d = nullptr;
  Combine combine = Combine::Sum;

  double get(const S& s) const { return i ? static_cast<double>(s.*i) : s.*d; }
};

template <typename S>
CounterField<S> counter(const char* name, int64_t S::*m, Combine c = Combine::Sum) {
  return {name, m, nullptr, c};
}
template <typename S>
CounterField<S> counter(const char* name, double S::*m, Combine c = Combine::Sum) {
  return {name, nullptr, m, c};
}

template <typename T>
T combine_values(Combine c, T a, T b) {
  switch (c) {
    case Combine::Sum: return a + b;
    case Combine::Max: return std::max(a, b);
    default: return a < 0 ? b : b < 0 ? a : std::min(a, b);
  }
}

// a = a combined with b, field by field (S::fields() is the table).
template <typename S>
void combine_counters(S& a, const S& b) {
  for (const CounterField<S>& f : S::fields()) {
    if (f.i)
      a.*f.i = combine_values(f.combine, a.*f.i, b.*f.i);
    else
      a.*f.d = combine_values(f.combine, a.*f.d, b.*f.d);
  }
}

}  // namespace moerun

// What the routers count while a batch of requests runs, with how each field combines across
// ranks (base/counter_fields.hpp). The field names are the keys of --stats-json.
#pragma once
#include <cstdint>
#include <vector>

#include "base/counter_fields.hpp"

namespace moerun::runtime {

// Steps with prompt tokens (prefill) and steps with generated tokens only (decode): their tokens
// (summed over routers) and the seconds those steps took (the slowest router). These are rates of
// step time; the progress line's rates are of wall time since serving began.
struct ThroughputCounters {
  int64_t generated_tokens = 0;  // tokens emitted
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  double first_token_s = -1;  // from the start of serving (warm-up included) to the first generated token; -1: none

  static const std::vector<CounterField<ThroughputCounters>>& fields() {
    using T = ThroughputCounters;
    static const std::vector<CounterField<T>> f{counter("generated_tokens", &T::generated_tokens),
                                                counter("prefill_tokens", &T::prefill_tokens),
                                                counter("decode_tokens", &T::decode_tokens),
                                                counter("prefill_seconds", &T::prefill_seconds, Combine::Max),
                                                counter("decode_seconds", &T::decode_seconds, Combine::Max),
                                                counter("time_to_first_token_s", &T::first_token_s, Combine::Earliest)};
    return f;
  }
};

// The routers' result journals.
struct JournalCounters {
  int64_t results = 0;  // results journaled
  int64_t syncs = 0;  // fdatasyncs: one per step, not per result (group commit)

  static const std::vector<CounterField<JournalCounters>>& fields() {
    using J = JournalCounters;
    static const std::vector<CounterField<J>> f{counter("results", &J::results), counter("syncs", &J::syncs)};
    return f;
  }
};

}  // namespace moerun::runtime

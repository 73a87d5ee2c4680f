// Cross-rank reduction of a counter struct, derived from its field table (base/counter_fields.hpp):
// integer sums travel as int64 (exact), everything else as doubles. Collective; the result is
// valid on rank 0.
#pragma once
#include <vector>

#include <mpi.h>

#include "base/counter_fields.hpp"
#include "comm/collectives.hpp"

namespace moerun::comm {

template <typename S>
void reduce_counters_to_root(S& s, MPI_Comm comm) {
  if (size_of(comm) == 1) return;
  std::vector<int64_t> sums;
  std::vector<double> dsums, maxes;  // Earliest: the max of negated times, none as -inf
  for (const CounterField<S>& f : S::fields()) {
    if (f.combine == Combine::Sum && f.i)
      sums.push_back(s.*f.i);
    else if (f.combine == Combine::Sum)
      dsums.push_back(s.*f.d);
    else if (f.combine == Combine::Max)
      maxes.push_back(f.get(s));
    else
      maxes.push_back(f.get(s) >= 0 ? -f.get(s) : -1e300);
  }
  if (!sums.empty()) reduce_sum_to_root(sums, comm);
  if (!dsums.empty()) reduce_sum_to_root(dsums, comm);
  if (!maxes.empty()) reduce_max_to_root(maxes, comm);
  std::size_t a = 0, b = 0, c = 0;
  for (const CounterField<S>& f : S::fields()) {
    if (f.combine == Combine::Sum && f.i) {
      s.*f.i = sums[a++];
      continue;
    }
    double v = 0;
    if (f.combine == Combine::Sum) {
      v = dsums[b++];
    } else {
      v = maxes[c++];
      if (f.combine == Combine::Earliest) v = v > -1e299 ? -v : -1;
    }
    if (f.i)
      s.*f.i = static_cast<int64_t>(v);
    else
      s.*f.d = v;
  }
}

}  // namespace moerun::comm

// Splitting a replicated expert's rows among the ranks holding it (issue 27). Every router computes
// the same split from the same inputs: the expert's rows over all routers (in router order), its
// holders, and the rows each rank already gets from the experts it alone holds. Each replicated
// expert is water-filled onto its holders (fewest holders first, then the hottest), then re-levelled
// given all the others in two more passes, so that the busiest rank stays as light as possible.
// Part boundaries fall on multiples of `granule` rows: the expert backend
// computes an expert's rows in calls of that many (the last takes the rest), so a part gives the
// same bits as the whole (experts/backend.hpp: replica_row_granule); granule 0 sends an expert's rows to one
// holder whole.
#pragma once
#include <cstdint>
#include <vector>

namespace moerun::experts {

struct ReplicaPart {
  int rank = 0;
  int64_t begin = 0, end = 0;  // rows [begin, end) of the expert's rows over every router, in router order
};

struct ReplicaSplit {
  std::vector<int64_t> rank_rows;  // [world rank] rows each rank gets in this layer
  std::vector<std::vector<ReplicaPart>> parts;  // [expert] in row order; empty when it has no rows
};

// totals[e]: rows of expert e over every router; holders[e] (an array of totals.size()): its ranks.
ReplicaSplit split_among_holders(const std::vector<int64_t>& totals, const std::vector<int>* holders, int world_size, int64_t granule);

// The rows [first, first + count) one router holds of an expert (in the order over every router) cut
// along the expert's parts: calls f(rank, local_begin, local_end) for each non-empty piece.
template <typename F>
void for_each_piece(const std::vector<ReplicaPart>& parts, int64_t first, int64_t count, F&& f) {
  for (const ReplicaPart& p : parts) {
    const int64_t b = p.begin > first ? p.begin : first, e = p.end < first + count ? p.end : first + count;
    if (b < e) f(p.rank, b - first, e - first);
  }
}

}  // namespace moerun::experts

// DispatchPlan: groups the (token, slot) pairs of a routing decision by expert (rows of expert e are
// [offset[e], offset[e+1]) in token-then-slot order) and undoes it. permute_rows gathers the input
// rows each expert needs; combine_rows sums the experts' outputs back per token, weighted, in slot
// order (a fixed summation order, so results do not depend on the layout).
#pragma once
#include <cstdint>
#include <vector>

namespace moerun::router {

struct DispatchPlan {
  int64_t tokens = 0;
  int64_t top_k = 0;
  int64_t num_experts = 0;
  std::vector<int64_t> offset;  // [E + 1]
  std::vector<int32_t> row_token;  // [rows] token of each gathered row
  std::vector<int64_t> slot_row;  // [T * k] gathered row of slot (t, j), -1 when dropped

  int64_t rows() const { return offset.empty() ? 0 : offset.back(); }
  int64_t rows_of(int64_t e) const { return offset[e + 1] - offset[e]; }

  // `expert[t * k + j]` in [0, E) or -1 (dropped).
  static DispatchPlan build(const int32_t* expert, int64_t T, int64_t k, int64_t E);
};

// gathered[r, :] = x[row_token[r], :]
void permute_rows(const float* x, int64_t d, const DispatchPlan& plan, float* gathered);
// out[t, :] = sum over j in 0..k-1 of weight[t*k+j] * y[slot_row[t*k+j], :]  (dropped slots skipped)
void combine_rows(const float* y, int64_t d, const DispatchPlan& plan, const float* weight, float* out);

}  // namespace moerun::router

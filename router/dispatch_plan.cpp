// DispatchPlan construction (counting sort by expert) and the permute/combine kernels.
#include "router/dispatch_plan.hpp"

#include <algorithm>
#include <cstring>

#include "base/parallel_for.hpp"

namespace moerun::router {

DispatchPlan DispatchPlan::build(const int32_t* expert, int64_t T, int64_t k, int64_t E) {
  DispatchPlan p;
  p.tokens = T;
  p.top_k = k;
  p.num_experts = E;
  p.offset.assign(static_cast<std::size_t>(E + 1), 0);
  for (int64_t i = 0; i < T * k; ++i)
    if (expert[i] >= 0) ++p.offset[expert[i] + 1];
  for (int64_t e = 0; e < E; ++e) p.offset[e + 1] += p.offset[e];
  p.row_token.assign(static_cast<std::size_t>(p.offset[E]), 0);
  p.slot_row.assign(static_cast<std::size_t>(T * k), -1);
  std::vector<int64_t> fill(p.offset.begin(), p.offset.end() - 1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = expert[t * k + j];
      if (e < 0) continue;
      const int64_t r = fill[e]++;
      p.row_token[r] = static_cast<int32_t>(t);
      p.slot_row[t * k + j] = r;
    }
  return p;
}

void permute_rows(const float* x, int64_t d, const DispatchPlan& plan, float* gathered) {
  const int64_t rows = plan.rows();
  parallel_for(rows, rows * d > 65536, [&](int64_t r) {
    std::memcpy(gathered + r * d, x + static_cast<int64_t>(plan.row_token[r]) * d, static_cast<std::size_t>(d) * sizeof(float));
  });
}

void combine_rows(const float* y, int64_t d, const DispatchPlan& plan, const float* weight, float* out) {
  const int64_t T = plan.tokens, k = plan.top_k;
  parallel_for(T, T * d * k > 65536, [&](int64_t t) {
    float* o = out + t * d;
    std::fill(o, o + d, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = plan.slot_row[t * k + j];
      if (r < 0) continue;
      const float w = weight[t * k + j];
      const float* src = y + r * d;
      for (int64_t i = 0; i < d; ++i) o[i] += w * src[i];
    }
  });
}

}  // namespace moerun::router

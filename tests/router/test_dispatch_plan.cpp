// DispatchPlan: grouping by expert, permute, and combine weighted in slot order (3 tokens, 3 experts,
// top-2, one slot dropped), against a direct per-slot computation.
#include <gtest/gtest.h>

#include "router/dispatch_plan.hpp"

namespace moerun::router {
namespace {

TEST(DispatchPlan, GroupsByExpertInTokenThenSlotOrder) {
  const int32_t expert[6] = {2, 0, 0, 2, 1, -1};
  const DispatchPlan p = DispatchPlan::build(expert, 3, 2, 3);
  EXPECT_EQ(p.offset, (std::vector<int64_t>{0, 2, 3, 5}));
  EXPECT_EQ(p.row_token, (std::vector<int32_t>{0, 1, 2, 0, 1}));
  EXPECT_EQ(p.slot_row, (std::vector<int64_t>{3, 0, 1, 4, 2, -1}));
}

TEST(DispatchPlan, PermuteAndCombineUndoEachOther) {
  const int32_t expert[6] = {2, 0, 0, 2, 1, -1};
  const float weight[6] = {0.7f, 0.3f, 0.4f, 0.6f, 1.0f, 0.0f};
  const DispatchPlan p = DispatchPlan::build(expert, 3, 2, 3);
  const int64_t d = 2;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<float> g(static_cast<std::size_t>(p.rows() * d));
  permute_rows(x.data(), d, p, g.data());
  // "Expert e" multiplies by (e + 1): y = (e+1) * x.
  std::vector<float> y(g.size());
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t r = p.offset[e]; r < p.offset[e + 1]; ++r)
      for (int64_t i = 0; i < d; ++i) y[r * d + i] = static_cast<float>(e + 1) * g[r * d + i];
  std::vector<float> out(6);
  combine_rows(y.data(), d, p, weight, out.data());
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t i = 0; i < d; ++i) {
      double want = 0;
      for (int64_t j = 0; j < 2; ++j)
        if (expert[t * 2 + j] >= 0) want += weight[t * 2 + j] * (expert[t * 2 + j] + 1) * x[t * d + i];
      EXPECT_NEAR(out[t * d + i], want, 1e-6);
    }
}

}  // namespace
}  // namespace moerun::router

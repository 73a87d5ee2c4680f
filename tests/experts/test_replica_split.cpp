// The split of replicated experts' rows among their holders: hand-derived water-filling, the
// granule's boundaries, one holder whole at granule 0, each router's pieces, and over random
// loads that the parts always cover the rows exactly once.
#include <gtest/gtest.h>

#include <random>

#include "experts/replica_split.hpp"

namespace moerun::experts {
namespace {

// Ranks 1 and 2 hold expert 0 (100 rows); rank 1 alone holds expert 1 (40 rows). Levelling the
// two: rank 1 gets 30 more, rank 2 gets 70.
const std::vector<int> kHolders[2] = {{1, 2}, {1}};

TEST(ReplicaSplit, WaterFillsTheHolders) {
  const ReplicaSplit s = split_among_holders({100, 40}, kHolders, 3, 1);
  ASSERT_EQ(s.parts[0].size(), 2u);
  EXPECT_EQ(s.parts[0][0].rank, 1);
  EXPECT_EQ(s.parts[0][0].end, 30);
  EXPECT_EQ(s.parts[0][1].rank, 2);
  EXPECT_EQ(s.parts[0][1].begin, 30);
  EXPECT_EQ(s.parts[0][1].end, 100);
  EXPECT_EQ(s.rank_rows, (std::vector<int64_t>{0, 70, 70}));
}

TEST(ReplicaSplit, BoundariesOnTheGranule) {
  const ReplicaSplit s = split_among_holders({100, 40}, kHolders, 3, 32);  // 30 rounds to 32
  ASSERT_EQ(s.parts[0].size(), 2u);
  EXPECT_EQ(s.parts[0][0].end, 32);
  EXPECT_EQ(s.rank_rows, (std::vector<int64_t>{0, 72, 68}));
  // Rows not above the granule, and granule 0: whole, to the lighter holder.
  for (int64_t g : {int64_t{0}, int64_t{100}}) {
    const ReplicaSplit w = split_among_holders({100, 40}, kHolders, 3, g);
    ASSERT_EQ(w.parts[0].size(), 1u) << g;
    EXPECT_EQ(w.parts[0][0].rank, 2);
    EXPECT_EQ(w.rank_rows, (std::vector<int64_t>{0, 40, 100}));
  }
}

TEST(ReplicaSplit, EachRouterSendsItsPieces) {
  // Router 0 has rows [0, 20) of expert 0, router 1 rows [20, 100): parts [0, 30) -> 1, [30, 100) -> 2.
  const ReplicaSplit s = split_among_holders({100, 40}, kHolders, 3, 1);
  std::vector<std::tuple<int, int64_t, int64_t>> r0, r1;
  for_each_piece(s.parts[0], 0, 20, [&](int rank, int64_t b, int64_t e) { r0.emplace_back(rank, b, e); });
  for_each_piece(s.parts[0], 20, 80, [&](int rank, int64_t b, int64_t e) { r1.emplace_back(rank, b, e); });
  EXPECT_EQ(r0, (std::vector<std::tuple<int, int64_t, int64_t>>{{1, 0, 20}}));
  EXPECT_EQ(r1, (std::vector<std::tuple<int, int64_t, int64_t>>{{1, 0, 10}, {2, 10, 80}}));
}

TEST(ReplicaSplit, PartsCoverEveryRowOnceOnTheGranule) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 12), P = 2 + static_cast<int>(rng() % 6);
    const int64_t granule = trial % 3 == 0 ? 0 : trial % 3 == 1 ? 1 : 16;
    std::vector<int64_t> totals(E);
    std::vector<std::vector<int>> holders(E);
    for (int e = 0; e < E; ++e) {
      totals[e] = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % 400);
      std::vector<int> ranks;
      for (int r = 0; r < P; ++r) ranks.push_back(r);
      std::shuffle(ranks.begin(), ranks.end(), rng);
      holders[e].assign(ranks.begin(), ranks.begin() + 1 + static_cast<int>(rng() % P));
    }
    const ReplicaSplit s = split_among_holders(totals, holders.data(), P, granule);
    int64_t sum = 0;
    for (int e = 0; e < E; ++e) {
      int64_t at = 0;
      for (const ReplicaPart& p : s.parts[e]) {
        EXPECT_EQ(p.begin, at);
        EXPECT_GT(p.end, p.begin);
        if (p.end != totals[e] && granule > 0) {
          EXPECT_EQ(p.end % granule, 0) << "a boundary off the granule";
        }
        EXPECT_NE(std::find(holders[e].begin(), holders[e].end(), p.rank), holders[e].end());
        at = p.end;
      }
      EXPECT_EQ(at, totals[e]);
      if (granule == 0) {
        EXPECT_LE(s.parts[e].size(), 1u);
      }
      sum += totals[e];
    }
    int64_t got = 0;
    for (int64_t r : s.rank_rows) got += r;
    EXPECT_EQ(got, sum);
  }
}

}  // namespace
}  // namespace moerun::experts

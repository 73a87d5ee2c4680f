// NodeSharedMemory on three real ranks of one host: each rank's writes to its region are seen by
// the others after a fence, regions grow collectively (keeping nothing, moving or not), and a
// fence orders repeated rounds.
#include <gtest/gtest.h>

#include <mpi.h>

#include <cstring>

#include "comm/shared_memory.hpp"

namespace moerun::comm {
namespace {

TEST(SharedMemory, WritesAreSeenAfterAFenceAndRegionsGrow) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, 3);
  std::vector<int> ranks{0, 1, 2};
  NodeSharedMemory shm(MPI_COMM_WORLD, 256, 30, ranks);
  EXPECT_GE(shm.region_bytes(), 256u);
  for (std::size_t bytes : {std::size_t{256}, std::size_t{1} << 20}) {
    shm.reserve(bytes);
    ASSERT_GE(shm.region_bytes(), bytes);
    for (int round = 0; round < 3; ++round) {
      auto* mine = reinterpret_cast<int32_t*>(shm.region(rank));
      const std::size_t n = bytes / sizeof(int32_t);
      for (std::size_t i = 0; i < n; ++i) mine[i] = static_cast<int32_t>(rank * 1000003 + round * 7919 + static_cast<int>(i));
      shm.fence();
      for (int r = 0; r < size; ++r) {
        const auto* theirs = reinterpret_cast<const int32_t*>(shm.region(r));
        EXPECT_EQ(theirs[0], r * 1000003 + round * 7919) << "rank " << r << " round " << round;
        EXPECT_EQ(theirs[n - 1], r * 1000003 + round * 7919 + static_cast<int>(n - 1)) << "rank " << r;
      }
      shm.fence();  // nobody writes the next round before everyone has read this one
    }
  }
}

}  // namespace
}  // namespace moerun::comm

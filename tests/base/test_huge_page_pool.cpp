// HugePagePool and AlignedBuffer placed in one: alignment, reuse of released blocks, concurrent
// allocations that never overlap, the huge-page advice as the kernel reports it (/proc/self/smaps),
// and released pages leaving RSS.
#include "base/huge_page_pool.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <algorithm>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/aligned_buffer.hpp"

namespace moerun {
namespace {

// The smaps block of the mapping that holds `p`: its "Name: value" lines.
std::string smaps_of(const void* p) {
  std::ifstream in("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::string line, block;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      if (inside) return block;
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside) block += line + "\n";
  }
  return block;
}

long smaps_field_kb(const std::string& block, const std::string& name) {
  const auto i = block.find("\n" + name + ":");
  if (i == std::string::npos) return -1;
  return std::stol(block.substr(i + name.size() + 2));
}

bool thp_available() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  std::getline(in, s);
  return !s.empty() && s.find("[never]") == std::string::npos;
}

TEST(HugePagePool, AlignedBlocksOneAfterAnotherInARegion) {
  HugePagePool pool(4 << 20);
  void* a = pool.allocate(1000);
  void* b = pool.allocate(5000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % HugePagePool::kHugePage, 0u) << "a region starts on a huge page";
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) - reinterpret_cast<std::uintptr_t>(a), 4096u) << "1000 bytes take one 4 KiB unit";
  void* c = pool.allocate(6 << 20);  // more than a region: one of its own, rounded to huge pages
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(c) % HugePagePool::kHugePage, 0u);
  EXPECT_EQ(pool.mapped_bytes(), std::size_t{4 << 20} + (6 << 20));
  std::memset(c, 7, 6 << 20);
}

TEST(HugePagePool, ReleasedBlocksAreReusedBySizeAndLeaveRss) {
  HugePagePool pool(8 << 20);
  const std::size_t n = 4 << 20;
  auto* a = static_cast<char*>(pool.allocate(n));
  std::memset(a, 1, n);
  const long before = smaps_field_kb(smaps_of(a), "Rss");
  pool.release(a, n);
  const long after = smaps_field_kb(smaps_of(a), "Rss");
  EXPECT_LE(after, before - 4000) << "a released block's pages go back (RSS kB " << before << " -> " << after << ")";
  EXPECT_EQ(pool.allocate(n), a) << "the next block of that size is the released one";
  EXPECT_NE(pool.allocate(n / 2), a);
  EXPECT_EQ(a[0], 0) << "released pages come back zeroed";
}

TEST(HugePagePool, RegionsCarryTheHugePageAdvice) {
  HugePagePool pool;
  auto* p = static_cast<char*>(pool.allocate(4 << 20));
  std::memset(p, 1, 4 << 20);
  const std::string block = smaps_of(p);
  ASSERT_FALSE(block.empty());
  if (!thp_available()) {
    EXPECT_EQ(smaps_field_kb(block, "AnonHugePages"), 0) << "THP off here: ordinary pages, and the pool still works";
    return;
  }
  EXPECT_TRUE(pool.advised());
  EXPECT_EQ(smaps_field_kb(block, "THPeligible"), 1) << block;
}

TEST(HugePagePool, ConcurrentAllocationsNeverOverlap) {
  HugePagePool pool(4 << 20);
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::vector<std::pair<std::uintptr_t, std::size_t>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::size_t n = static_cast<std::size_t>(4096 * (1 + (i + t) % 37));
        void* p = pool.allocate(n);
        std::memset(p, t, n);
        got[static_cast<std::size_t>(t)].push_back({reinterpret_cast<std::uintptr_t>(p), n});
        if (i % 5 == 0) {
          pool.release(p, n);
          got[static_cast<std::size_t>(t)].pop_back();
        }
      }
    });
  for (auto& th : threads) th.join();
  std::vector<std::pair<std::uintptr_t, std::size_t>> all;
  for (auto& v : got) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  for (std::size_t i = 1; i < all.size(); ++i)
    ASSERT_GE(all[i].first, all[i - 1].first + all[i - 1].second) << "blocks " << i - 1 << " and " << i << " overlap";
}

TEST(AlignedBuffer, PlacedInAPoolItStaysThereThroughGrowthAndMoves) {
  auto pool = std::make_shared<HugePagePool>(4 << 20);
  AlignedBuffer b(pool);
  b.resize(100);
  EXPECT_EQ(b.capacity(), 4096u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % HugePagePool::kHugePage, 0u) << "the pool's first block";
  b.resize(3 << 20);
  EXPECT_EQ(b.pool(), pool);
  EXPECT_EQ(pool->mapped_bytes(), std::size_t{4 << 20}) << "grown inside the region";
  AlignedBuffer moved = std::move(b);
  EXPECT_EQ(moved.pool(), pool);
  EXPECT_EQ(b.pool(), nullptr);
  AlignedBuffer heap(100);
  EXPECT_EQ(heap.pool(), nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(heap.data()) % 64, 0u);
  pool.reset();  // the buffer keeps its pool alive
  std::memset(moved.data(), 3, moved.size());
}

}  // namespace
}  // namespace moerun

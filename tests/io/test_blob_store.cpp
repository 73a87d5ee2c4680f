// BlobStore (the L2 tier) on a real directory: parts round-trip and each starts on a page; the
// index survives a reopen; an entry of another model expert or another layout is not read back; a
// flipped byte in the blob file is caught by the checksum, dropped and counted; the budget stops
// puts without an error; forget removes an entry.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/aligned_buffer.hpp"
#include "io/blob_store.hpp"
#include "tests/test_support.hpp"

namespace moerun::io {
namespace {

namespace fs = std::filesystem;
constexpr std::size_t kPage = 4096;

struct Expert {
  AlignedBuffer a, b;
  Expert(std::size_t na, std::size_t nb, char seed) {
    a.resize((na + kPage - 1) / kPage * kPage);
    b.resize((nb + kPage - 1) / kPage * kPage);
    for (std::size_t i = 0; i < na; ++i) a.as<char>()[i] = static_cast<char>(seed + i % 97);
    for (std::size_t i = 0; i < nb; ++i) b.as<char>()[i] = static_cast<char>(seed * 3 + i % 89);
    sizes = {na, nb};
  }
  std::vector<ConstBlobPart> parts() const { return {{a.data(), sizes[0]}, {b.data(), sizes[1]}}; }
  std::vector<std::size_t> sizes;
};

struct Into {
  AlignedBuffer a, b;
  explicit Into(const Expert& e) {
    a.resize(e.a.size());
    b.resize(e.b.size());
    sizes = e.sizes;
  }
  std::vector<BlobPart> parts() { return {{a.data(), sizes[0], a.size()}, {b.data(), sizes[1], b.size()}}; }
  bool same_as(const Expert& e) const {
    return !std::memcmp(a.data(), e.a.data(), sizes[0]) && !std::memcmp(b.data(), e.b.data(), sizes[1]);
  }
  std::vector<std::size_t> sizes;
};

TEST(BlobStore, RoundTripReopenAndIdentity) {
  const fs::path dir = moerun::testing::scratch_dir("blob");
  const Expert e1(5000, 123, 1), e2(100, 9000, 2);
  {
    BlobStore s(dir.string(), 1 << 20, "layout-1", false);
    ASSERT_TRUE(s.put(0, 1, e1.parts(), 111));
    ASSERT_TRUE(s.put(2, 3, e2.parts(), 222));
    EXPECT_EQ(s.entries(), 2);
    Into got(e1);
    ASSERT_TRUE(s.read(0, 1, 111, got.parts()));
    EXPECT_TRUE(got.same_as(e1));
  }
  BlobStore again(dir.string(), 1 << 20, "layout-1", true);  // O_DIRECT where the filesystem allows
  EXPECT_TRUE(again.has(2, 3));
  Into got2(e2);
  ASSERT_TRUE(again.read(2, 3, 222, got2.parts()));
  EXPECT_TRUE(got2.same_as(e2));
  Into stale(e2);
  EXPECT_FALSE(again.read(2, 3, 999, stale.parts())) << "an entry made from another model expert was read back";
  BlobStore other(dir.string(), 1 << 20, "layout-2", false);
  EXPECT_EQ(other.entries(), 0) << "an entry of another layout survived";
  fs::remove_all(dir);
}

TEST(BlobStore, FlippedByteIsCaughtDroppedAndCounted) {
  const fs::path dir = moerun::testing::scratch_dir("blob");
  const Expert e(3000, 3000, 5);
  BlobStore s(dir.string(), 1 << 20, "layout", false);
  ASSERT_TRUE(s.put(1, 1, e.parts(), 7));
  {
    const int fd = ::open((dir / "experts.blob").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, 100), 1);
    c = static_cast<char>(c ^ 0x10);
    ASSERT_EQ(::pwrite(fd, &c, 1, 100), 1);
    ::close(fd);
  }
  Into got(e);
  EXPECT_FALSE(s.read(1, 1, 7, got.parts()));
  EXPECT_EQ(s.corrupt_dropped(), 1);
  EXPECT_FALSE(s.has(1, 1));
  fs::remove_all(dir);
}

TEST(BlobStore, BudgetStopsPutsAndForgetRemoves) {
  const fs::path dir = moerun::testing::scratch_dir("blob");
  const Expert e(3 * kPage, kPage, 9);  // 4 pages
  BlobStore s(dir.string(), 10 * kPage, "layout", false);
  EXPECT_TRUE(s.put(0, 0, e.parts(), 1));
  EXPECT_TRUE(s.put(0, 1, e.parts(), 1));
  EXPECT_FALSE(s.put(0, 2, e.parts(), 1)) << "a put beyond the budget";
  EXPECT_EQ(s.entries(), 2);
  s.forget(0, 0);
  EXPECT_FALSE(s.has(0, 0));
  EXPECT_TRUE(s.has(0, 1));
  EXPECT_EQ(s.corrupt_dropped(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moerun::io

// PositionalFile: bytes read at unaligned offsets equal the file's, with O_DIRECT (its aligned
// bounce span) and through the page cache; a read past the end is bad input naming the file; with
// random access expected, a small read brings its own pages into the page cache, no read-ahead.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "io/positional_file.hpp"

namespace moerun::io {
namespace {

class PositionalFileTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    // In the working directory (the build tree, on disk): /tmp may be tmpfs, which refuses O_DIRECT.
    path = std::filesystem::absolute("positional-" + std::to_string(::getpid()) + ".bin").string();
    bytes.resize(3 * 4096 + 777);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + 7) % 251);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  void TearDown() override { std::filesystem::remove(path); }
  std::string path;
  std::vector<unsigned char> bytes;
};

TEST_P(PositionalFileTest, ReadsTheBytesAtAnyOffset) {
  const PositionalFile f(path, GetParam());
  if (!GetParam()) EXPECT_FALSE(f.direct());
  for (auto [offset, n] : {std::pair<uint64_t, std::size_t>{0, 4096}, {1, 10}, {4095, 2}, {100, 3 * 4096}, {12000, 1065}}) {
    std::vector<unsigned char> got(n);
    f.read(offset, n, got.data());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset))) << offset << "+" << n;
  }
}

TEST_P(PositionalFileTest, ThreadsReadAtOnce) {
  const PositionalFile f(path, GetParam());
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<unsigned char> got(5000);
      for (int i = 0; i < 50; ++i) {
        const uint64_t offset = static_cast<uint64_t>((t * 997 + i * 131) % 7000);
        f.read(offset, got.size(), got.data());
        if (!std::equal(got.begin(), got.end(), bytes.begin() + static_cast<std::ptrdiff_t>(offset))) return;
      }
      ok[static_cast<std::size_t>(t)] = 1;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, std::vector<int>(4, 1));
}

TEST_P(PositionalFileTest, ReadPastTheEndIsBadInputNamingTheFile) {
  const PositionalFile f(path, GetParam());
  std::vector<unsigned char> got(100);
  try {
    f.read(bytes.size() - 50, 100, got.data());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(DirectAndBuffered, PositionalFileTest, ::testing::Bool());

TEST(PositionalFile, MissingFileIsAnIoError) {
  try {
    PositionalFile f("/nonexistent-moerun-dir/x.h5", false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
  }
}

// An embedding lookup reads one row: without the advice, lookups of neighbouring rows look
// sequential and bring in the device's read-ahead (128 KiB by default, 8 MiB on this project's
// virtio disk), which under a memory limit pushed the running code out of the page cache.
TEST(PositionalFile, RandomAccessReadsOnlyThePagesAsked) {
  const std::string path = std::filesystem::absolute("positional-random-" + std::to_string(::getpid()) + ".bin").string();
  const std::size_t bytes = std::size_t{16} << 20, page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  {
    std::vector<char> data(bytes, 'x');
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);  // clean pages: out of the page cache
  void* view = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);  // only to ask mincore, never touched
  ASSERT_NE(view, MAP_FAILED);
  std::vector<unsigned char> resident(bytes / page);
  auto cached_pages = [&] {
    EXPECT_EQ(::mincore(view, bytes, resident.data()), 0);
    std::size_t n = 0;
    for (unsigned char r : resident) n += r & 1;
    return n;
  };
  // tmpfs keeps every page (it is the page cache): there read-ahead cannot be observed.
  const bool dropped = cached_pages() == 0;
  std::size_t pages = 0;
  if (dropped) {
    const PositionalFile f(path, false);
    f.expect_random_access();
    for (std::size_t i = 0; i < 3; ++i) {  // three neighbouring rows: a sequential pattern to the kernel
      char c = 0;
      f.read(bytes / 2 + i * page, 1, &c);
      EXPECT_EQ(c, 'x');
    }
    pages = cached_pages();
  }
  ::munmap(view, bytes);
  ::close(fd);
  std::filesystem::remove(path);
  if (!dropped) GTEST_SKIP() << "the file's pages cannot be dropped from the page cache here (tmpfs?)";
  EXPECT_GE(pages, 1u);
  EXPECT_LE(pages, 4u) << "three one-byte reads brought " << pages << " pages into the page cache";
}

}  // namespace
}  // namespace moerun::io

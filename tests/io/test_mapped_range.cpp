// MappedRange: the bytes of an unaligned range read through the mapping equal the file's, they stay
// readable after release_resident (faulted in again), and a range past the end is bad input
// naming the file (before any mapping), a missing file an I/O error; with random access expected,
// a lookup faults in its own pages only (no read-around of the file).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/error.hpp"
#include "io/mapped_range.hpp"

namespace moerun::io {
namespace {

class MappedRangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path = std::filesystem::absolute("mapped-" + std::to_string(::getpid()) + ".bin").string();
    bytes.resize(3 * 4096 + 500);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>((i * 7 + 3) % 253);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  void TearDown() override { std::filesystem::remove(path); }
  std::string path;
  std::vector<unsigned char> bytes;
};

TEST_F(MappedRangeTest, UnalignedRangeReadsTheFilesBytes) {
  const MappedRange m(path, 4100, 5000);
  ASSERT_EQ(m.size(), 5000u);
  EXPECT_EQ(std::memcmp(m.data(), bytes.data() + 4100, 5000), 0);
  m.release_resident();
  EXPECT_EQ(std::memcmp(m.data(), bytes.data() + 4100, 5000), 0);
}

TEST_F(MappedRangeTest, PastTheEndIsBadInputNamingTheFile) {
  try {
    MappedRange m(path, bytes.size() - 10, 11);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// An embedding lookup reads one row: without MADV_RANDOM a fault reads around it by the device's
// read-ahead (128 KiB by default, 8 MiB on this project's virtio disk), which under a memory limit
// pushed the running code out of the page cache.
TEST(MappedRange, RandomAccessFaultsInOnlyThePagesTouched) {
  const std::string path = std::filesystem::absolute("mapped-random-" + std::to_string(::getpid()) + ".bin").string();
  const std::size_t bytes = std::size_t{16} << 20, page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  {
    std::vector<char> data(bytes, 'x');
    std::ofstream(path, std::ios::binary).write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);  // clean pages: out of the page cache
  {
    const MappedRange m(path, 0, bytes);
    m.expect_random_access();
    std::vector<unsigned char> resident(bytes / page);
    auto cached_pages = [&] {
      EXPECT_EQ(::mincore(const_cast<void*>(m.data()), bytes, resident.data()), 0);
      std::size_t n = 0;
      for (unsigned char r : resident) n += r & 1;
      return n;
    };
    // tmpfs keeps every page (it is the page cache): there read-around cannot be observed.
    if (cached_pages() != 0) GTEST_SKIP() << "the file's pages cannot be dropped from the page cache here (tmpfs?)";
    const auto* base = static_cast<const volatile char*>(m.data());
    EXPECT_EQ(base[bytes / 2], 'x');
    const std::size_t pages = cached_pages();
    EXPECT_GE(pages, 1u);
    EXPECT_LE(pages, 4u) << "a one-byte lookup brought " << pages << " pages into the page cache";
  }
  ::close(fd);
  std::filesystem::remove(path);
}

TEST(MappedRange, MissingFileIsAnIoError) {
  try {
    MappedRange m("/nonexistent-moerun-dir/model.h5", 0, 10);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
  }
}

}  // namespace
}  // namespace moerun::io

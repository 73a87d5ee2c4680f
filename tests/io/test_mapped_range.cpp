// MappedRange: the bytes of an unaligned range read through the mapping equal the file's, they stay
// readable after release_resident (faulted in again), and a range past the end is bad input
// naming the file (before any mapping), a missing file an I/O error.
#include <gtest/gtest.h>

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

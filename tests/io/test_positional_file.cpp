// PositionalFile: bytes read at unaligned offsets equal the file's, with O_DIRECT (its aligned
// bounce span) and through the page cache; a read past the end is bad input naming the file.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace moerun::io

// Files as their owner expects them (issue 21): one OutputLock per output (a second in the same
// process conflicts too, flock being per open file), outputs created under the umask and replaced
// with their mode, staging directories trusted only when private, FIFOs and directories refused
// without blocking, s3:// keys without empty segments.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "io/input_file.hpp"
#include "io/object_store.hpp"
#include "io/output_file.hpp"
#include "io/output_lock.hpp"
#include "io/private_dir.hpp"
#include "tests/test_support.hpp"

namespace moerun::io {
namespace {
namespace fs = std::filesystem;
using moerun::testing::error_of;

class FileSafety : public ::testing::Test {
 protected:
  void SetUp() override { dir = moerun::testing::scratch_dir("safety"); }
  void TearDown() override {
    ::umask(saved_umask);
    fs::remove_all(dir);
  }
  static mode_t mode_of(const fs::path& p) {
    struct stat sb{};
    EXPECT_EQ(::stat(p.c_str(), &sb), 0);
    return sb.st_mode & 07777;
  }
  fs::path dir;
  mode_t saved_umask = ::umask(022);
};

TEST_F(FileSafety, OneLockPerOutput) {
  const std::string out = (dir / "out.jsonl").string();
  {
    OutputLock first(out);
    EXPECT_TRUE(fs::exists(out + ".lock"));
    const std::string e = error_of([&] { OutputLock second(out); }, ErrorKind::Usage);
    EXPECT_NE(e.find("is being written by another run (pid " + std::to_string(::getpid())), std::string::npos) << e;
    OutputLock other((dir / "other.jsonl").string());  // another output is free
  }
  EXPECT_FALSE(fs::exists(out + ".lock"));  // removed by its holder
  OutputLock again(out);                    // and free again
}

TEST_F(FileSafety, LockThatIsNotARegularFileIsRefused) {
  const std::string out = (dir / "out.jsonl").string();
  ASSERT_EQ(::mkfifo((out + ".lock").c_str(), 0600), 0);
  const std::string e = error_of([&] { OutputLock l(out); }, ErrorKind::Usage);
  EXPECT_NE(e.find("out.jsonl.lock: is a FIFO"), std::string::npos) << e;
}

TEST_F(FileSafety, OutputsFollowTheUmaskAndReplacedFilesKeepTheirMode) {
  ::umask(077);
  const fs::path p = dir / "a.txt";
  write_file_atomically(p.string(), {"one"});
  EXPECT_EQ(mode_of(p), 0600u);
  ::umask(022);
  write_file_atomically((dir / "b.txt").string(), {"one"});
  EXPECT_EQ(mode_of(dir / "b.txt"), 0644u);
  ASSERT_EQ(::chmod(p.c_str(), 0640), 0);
  write_file_atomically(p.string(), {"two"});
  EXPECT_EQ(mode_of(p), 0640u);
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "two");
}

TEST_F(FileSafety, OutputNameTooLongFailsBeforeAnyWork) {
  const std::string out = (dir / std::string(250, 'o')).string();
  const std::string e = error_of([&] { check_output_target(out, "--output"); }, ErrorKind::Io);
  EXPECT_NE(e.find("File name too long"), std::string::npos) << e;
  EXPECT_TRUE(fs::is_empty(dir));  // the probe file is gone
}

TEST_F(FileSafety, PrivateDirectories) {
  const fs::path ok = dir / "ok";
  make_private_directory(ok.string());
  EXPECT_EQ(mode_of(ok), 0700u);
  make_private_directory(ok.string());  // existing and private: fine
  const fs::path open_dir = dir / "open";
  fs::create_directory(open_dir);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);
  EXPECT_NE(error_of([&] { make_private_directory(open_dir.string()); }, ErrorKind::Io).find("writable by group or others (mode 0777)"),
            std::string::npos);
  const fs::path link = dir / "link";
  fs::create_directory_symlink(ok, link);
  EXPECT_NE(error_of([&] { check_private_directory(link.string(), "--staging"); }, ErrorKind::Io).find("is a symlink"),
            std::string::npos);
  if (::geteuid() == 0) {  // root can hand a directory to another user
    const fs::path theirs = dir / "theirs";
    fs::create_directory(theirs);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_NE(error_of([&] { make_private_directory(theirs.string()); }, ErrorKind::Io).find("is owned by uid 65534"),
              std::string::npos);
  }
}

TEST_F(FileSafety, FifosAndDirectoriesAreRefusedWithoutBlocking) {
  const fs::path fifo = dir / "ctl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);  // no writer: a blocking open would wait forever
  EXPECT_NE(error_of([&] { read_regular_file(fifo.string(), ErrorKind::Usage); }, ErrorKind::Usage).find("ctl: is a FIFO"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_regular_file(fifo.string()); }, ErrorKind::BadInput).find("is a FIFO"), std::string::npos);
  EXPECT_NE(error_of([&] { read_regular_file(dir.string()); }, ErrorKind::BadInput).find("is a directory"), std::string::npos);
  EXPECT_FALSE(check_regular_file((dir / "missing").string()));
  EXPECT_NE(error_of([&] { read_regular_file((dir / "missing").string()); }, ErrorKind::Io).find("cannot open"), std::string::npos);
}

TEST_F(FileSafety, S3KeysHaveNoEmptySegments) {
  for (const char* u : {"s3://bkt//x", "s3://bkt/a//b", "s3://bkt/./x", "s3://bkt/a/../b"})
    EXPECT_NE(error_of([&] { parse_s3_url(u); }, ErrorKind::Usage).find("empty, . or .. path segment"), std::string::npos) << u;
  EXPECT_EQ(parse_s3_url("s3://bkt/a/b/").key, "a/b");
  EXPECT_EQ(parse_s3_url("s3://bkt").key, "");
}

}  // namespace
}  // namespace moerun::io

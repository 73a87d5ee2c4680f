// Files as their owner expects them (issue 21): one OutputLock per output (a second in the same
// process conflicts too, flock being per open file), outputs created under the umask and replaced
// with their mode, staging directories trusted only when private, FIFOs and directories refused
// without blocking, s3:// keys without empty segments. The one rule for files moerun writes (issue
// 63): a link planted at a name is replaced or refused, never written through; a file written in
// place is refused when it is a link, has a second name or is another user's; the L2 directory is
// private, and a second store on it reads without writing.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "io/input_file.hpp"
#include "io/blob_store.hpp"
#include "io/object_store.hpp"
#include "io/output_file.hpp"
#include "io/output_lock.hpp"
#include "io/private_dir.hpp"
#include "io/result_journal.hpp"
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
    struct stat sb {};
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
  OutputLock again(out);  // and free again
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
  EXPECT_NE(error_of([&] { check_private_directory(link.string(), "--staging"); }, ErrorKind::Io).find("is a symlink"), std::string::npos);
  if (::geteuid() == 0) {  // root can hand a directory to another user
    const fs::path theirs = dir / "theirs";
    fs::create_directory(theirs);
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_NE(error_of([&] { make_private_directory(theirs.string()); }, ErrorKind::Io).find("is owned by uid 65534"), std::string::npos);
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

std::string content_of(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A link planted where moerun makes a file (a side file, a cache) is replaced by the new file; the
// file it pointed at (here standing in for a model shard) keeps its bytes.
TEST_F(FileSafety, ALinkPlantedAtANameIsReplacedNeverWrittenThrough) {
  const fs::path victim = dir / "model.h5", name = dir / "experts-index.bin";
  std::ofstream(victim) << "the model\n";
  fs::create_symlink(victim, name);
  AtomicFile f(name.string());
  f.write("the index\n");
  f.commit();
  EXPECT_EQ(content_of(victim), "the model\n");
  EXPECT_FALSE(fs::is_symlink(name));
  EXPECT_EQ(content_of(name), "the index\n");
  // A dangling link (to a file that would be created) is replaced too, and nothing is made there.
  fs::remove(name);
  fs::create_symlink(dir / "nowhere", name);
  write_file_atomically(name.string(), {"x"});
  EXPECT_FALSE(fs::exists(dir / "nowhere"));
}

TEST_F(FileSafety, FilesWrittenInPlaceMustBeThisUsersOneNameRegularFiles) {
  const fs::path victim = dir / "victim", link = dir / "out.jsonl.journal", hard = dir / "hard";
  std::ofstream(victim) << "keep\n";
  fs::create_symlink(victim, link);
  const std::string e = error_of([&] { open_owned_file(link.string(), O_WRONLY | O_APPEND, "the journal"); }, ErrorKind::Usage);
  EXPECT_NE(e.find("is a symbolic link; moerun never writes the journal through a link"), std::string::npos) << e;
  fs::create_hard_link(victim, hard);
  const std::string h = error_of([&] { open_owned_file(hard.string(), O_RDWR | O_CREAT, "the L2 blob"); }, ErrorKind::Usage);
  EXPECT_NE(h.find("has 2 hard links"), std::string::npos) << h;
  ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { open_owned_file((dir / "fifo").string(), O_WRONLY, "the lock"); }, ErrorKind::Usage).find("is a FIFO"),
            std::string::npos);
  if (::geteuid() == 0) {
    const fs::path theirs = dir / "theirs";
    std::ofstream(theirs) << "x";
    ASSERT_EQ(::chown(theirs.c_str(), 65534, 65534), 0);
    EXPECT_NE(error_of([&] { open_owned_file(theirs.string(), O_RDWR, "the L2 blob"); }, ErrorKind::Usage).find("owned by uid 65534"),
              std::string::npos);
  }
  EXPECT_EQ(content_of(victim), "keep\n");
  const int fd = open_owned_file((dir / "fresh").string(), O_RDWR | O_CREAT, "the lock");
  EXPECT_GE(fd, 0);
  ::close(fd);
  // The journal and the lock go through it.
  const std::string out = (dir / "out.jsonl").string();
  EXPECT_NE(error_of([&] { ResultJournal j(out, 0, false, {}); }, ErrorKind::Usage).find("symbolic link"), std::string::npos);
  fs::create_symlink(victim, out + ".lock");
  EXPECT_NE(error_of([&] { OutputLock l(out); }, ErrorKind::Usage).find("symbolic link"), std::string::npos);
  EXPECT_EQ(content_of(victim), "keep\n");
}

// An output's identity is its name: a link at an output's name is not its target, an input's is.
TEST_F(FileSafety, OutputsAreComparedByNameInputsByWhatTheyReach) {
  const fs::path in = dir / "config.json", link = dir / "model.h5";
  std::ofstream(in) << "{}";
  fs::create_symlink(in, link);
  check_distinct_paths({{in.string(), "--from"}}, {{link.string(), "--out"}});  // the write replaces the link
  const fs::path in_link = dir / "reqs";
  fs::create_symlink(in, in_link);
  EXPECT_NE(error_of(
                [&] {
                  check_distinct_paths({{in_link.string(), "--input"}}, {{in.string(), "--output"}});
                },
                ErrorKind::Usage)
                .find("is the --input file"),
            std::string::npos);
}

TEST_F(FileSafety, TheL2DirectoryIsPrivateAndItsFilesAreNeverWrittenThrough) {
  const fs::path victim = dir / "shard.h5";
  std::ofstream(victim) << "shard bytes\n";
  const fs::path l2 = dir / "rank-0";
  make_private_directory(l2.string());
  fs::create_symlink(victim, l2 / "experts.blob");
  EXPECT_NE(error_of([&] { BlobStore b(l2.string(), 1 << 20, "x"); }, ErrorKind::Usage).find("experts.blob: is a symbolic link"),
            std::string::npos);
  fs::remove(l2 / "experts.blob");
  fs::create_symlink(victim, l2 / "index.json");
  {
    BlobStore b(l2.string(), 1 << 20, "x", false);
    std::vector<char> part(100, 7);
    EXPECT_TRUE(b.put(0, 1, {{part.data(), part.size()}}, 42));
  }
  EXPECT_EQ(content_of(victim), "shard bytes\n");
  EXPECT_FALSE(fs::is_symlink(l2 / "index.json"));
  const fs::path shared = dir / "shared";
  fs::create_directory(shared);
  ASSERT_EQ(::chmod(shared.c_str(), 0777), 0);
  EXPECT_NE(error_of([&] { BlobStore b(shared.string(), 1 << 20, "x"); }, ErrorKind::Io).find("writable by group or others"),
            std::string::npos);
}

// Two runs on one L2 directory: the second reads what the first holds and writes nothing.
TEST_F(FileSafety, ASecondStoreOnTheSameL2DirectoryReadsAndAddsNothing) {
  const fs::path l2 = dir / "rank-0";
  std::vector<char> part(5000, 3), back(8192);
  BlobStore first(l2.string(), 1 << 20, "x", false);
  ASSERT_TRUE(first.put(0, 1, {{part.data(), part.size()}}, 42));
  BlobStore second(l2.string(), 1 << 20, "x", false);
  EXPECT_TRUE(second.read_only());
  EXPECT_FALSE(first.read_only());
  EXPECT_TRUE(second.read(0, 1, 42, {{back.data(), part.size(), back.size()}}));
  EXPECT_EQ(std::memcmp(back.data(), part.data(), part.size()), 0);
  EXPECT_FALSE(second.put(0, 2, {{part.data(), part.size()}}, 43));
  EXPECT_EQ(first.entries(), 1);
  EXPECT_EQ(fs::file_size(l2 / "experts.blob"), 5000u);
}

// Log lines quote bytes read from files: escaped as error lines are (\xNN), here an L2 index with
// bytes that are not UTF-8 (its warning printed them raw).
TEST_F(FileSafety, LogLinesEscapeBytesThatAreNotUtf8) {
  const fs::path l2 = dir / "rank-0";
  make_private_directory(l2.string());
  std::ofstream(l2 / "index.json") << "{\"format_version\": 2, \"layout\": \"\xff\xfe\x01\"}";
  ::testing::internal::CaptureStderr();
  { BlobStore b(l2.string(), 1 << 20, "x", false); }
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("\\xff"), std::string::npos) << err;
  EXPECT_EQ(err.find('\xff'), std::string::npos) << err;
  EXPECT_EQ(err.find('\x01'), std::string::npos) << err;
}

}  // namespace
}  // namespace moerun::io

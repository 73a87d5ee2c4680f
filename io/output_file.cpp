// Output target checks and atomic replacement (POSIX: mkstemp, fsync, rename).
#include "io/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

#include "base/error.hpp"
#include "io/input_file.hpp"

namespace moerun::io {
namespace fs = std::filesystem;
namespace {

const char* kind_of(mode_t m) {
  return file_type_name(m);
}

struct FileId {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string spelling;  // absolute, normalised, symlinks resolved where they exist
};

// An input is the file a read reaches (links followed); an output is the name a write replaces
// (its directory resolved, a link at the name itself not followed: rename(2) replaces the link).
FileId file_id(const std::string& path, bool follow) {
  FileId id;
  std::error_code ec;
  const fs::path abs = fs::absolute(path, ec).lexically_normal();
  const fs::path canon = follow ? fs::weakly_canonical(abs, ec) : fs::weakly_canonical(abs.parent_path(), ec) / abs.filename();
  id.spelling = ec ? abs.string() : canon.string();
  struct stat sb {};
  if ((follow ? ::stat(path.c_str(), &sb) : ::lstat(path.c_str(), &sb)) == 0) {
    id.exists = true;
    id.dev = sb.st_dev;
    id.ino = sb.st_ino;
  }
  return id;
}

bool same_file(const FileId& a, const FileId& b) {
  if (a.exists && b.exists) return a.dev == b.dev && a.ino == b.ino;
  return a.spelling == b.spelling;
}

// Is `p` one of the side files written next to output `o`: o.journal, o.journal.N, o.N, o.tmp*?
bool is_side_file(const std::string& o, const std::string& p) {
  if (p.size() <= o.size() + 1 || p.compare(0, o.size(), o) != 0 || p[o.size()] != '.') return false;
  const std::string rest = p.substr(o.size() + 1);
  auto digits = [](const std::string& s) { return !s.empty() && std::all_of(s.begin(), s.end(), ::isdigit); };
  if (digits(rest) || rest == "journal" || rest == "lock" || rest.rfind("tmp", 0) == 0) return true;
  return rest.rfind("journal.", 0) == 0 && digits(rest.substr(8));
}

}  // namespace

void check_output_target(const std::string& path, const std::string& option) {
  struct stat sb {};
  if (::lstat(path.c_str(), &sb) == 0 && S_ISLNK(sb.st_mode))
    fail(ErrorKind::Usage, option, " ", path, ": is a symbolic link; moerun never writes through a link (name the file itself)");
  if (::lstat(path.c_str(), &sb) == 0 && !S_ISREG(sb.st_mode))
    fail(ErrorKind::Usage, option, " ", path, ": is ", kind_of(sb.st_mode),
         "; outputs are written as new regular files, refusing to replace it");
  const std::string dir = parent_dir(path);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail(ErrorKind::Io, path, ": output directory ", dir, " does not exist");
  if (::access(dir.c_str(), W_OK) != 0) fail(ErrorKind::Io, path, ": output directory ", dir, " is not writable");
  // The longest name a run makes next to it (OUT.tmp.XXXXXX, as long as OUT.journal.NN) is made
  // and removed now, so a name too long for the file system fails before the run, not after it.
  AtomicFile probe(path);
}

void check_distinct_paths(const std::vector<PathUse>& inputs, const std::vector<PathUse>& outputs) {
  std::vector<FileId> out_ids;
  for (const auto& o : outputs) out_ids.push_back(file_id(o.path, false));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const auto& in : inputs) {
      const FileId id = file_id(in.path, true);
      if (same_file(id, out_ids[i]))
        fail(ErrorKind::Usage, outputs[i].option, " ", outputs[i].path, " is the ", in.option, " file; writing it would destroy the input");
      if (is_side_file(out_ids[i].spelling, id.spelling))
        fail(ErrorKind::Usage, in.option, " ", in.path, " would be overwritten by a side file of ", outputs[i].option, " ",
             outputs[i].path);
    }
    for (std::size_t j = 0; j < i; ++j)
      if (same_file(out_ids[i], out_ids[j]) || is_side_file(out_ids[j].spelling, out_ids[i].spelling) ||
          is_side_file(out_ids[i].spelling, out_ids[j].spelling))
        fail(ErrorKind::Usage, outputs[i].option, " and ", outputs[j].option, " name the same file (", outputs[i].path, ")");
  }
}

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  struct stat sb {};
  const bool exists = ::lstat(path_.c_str(), &sb) == 0;
  if (exists && !S_ISREG(sb.st_mode) && !S_ISLNK(sb.st_mode))
    fail(ErrorKind::Usage, path, ": is ", kind_of(sb.st_mode), "; refusing to replace it with a regular file");
  const bool replacing = exists && S_ISREG(sb.st_mode);  // a link's mode is not the file's
  // Not mkstemp (always 0600): created 0666 so that the kernel applies the umask, as for any new
  // file; a replaced file keeps its own mode.
  std::random_device rd;
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int attempt = 0; attempt < 100 && fd_ < 0; ++attempt) {
    tmp_ = path_ + ".tmp.";
    for (int i = 0; i < 6; ++i) tmp_ += kChars[rd() % (sizeof kChars - 1)];
    fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ < 0 && errno != EEXIST) break;
  }
  if (fd_ < 0) fail(ErrorKind::Io, path, ": cannot create a temporary file next to it: ", std::strerror(errno));
  if (replacing && ::fchmod(fd_, sb.st_mode & 07777) != 0) {
    const int err = errno;
    ::close(fd_);
    ::unlink(tmp_.c_str());
    fd_ = -1;
    fail(ErrorKind::Io, path, ": cannot give the new file the mode of the old one: ", std::strerror(err));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const std::string& data) {
  write_fully(fd_, data, tmp_);
}

void AtomicFile::commit() {
  // Through a fresh descriptor: a writer that opened the temp file by name (HDF5) wrote there.
  int fd = ::open(tmp_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) fail(ErrorKind::Io, tmp_, ": fsync failed: ", std::strerror(errno));
  ::close(fd);
  // rename(2) replaces the name itself: a symlink planted there since the checks is replaced, and
  // the file it points at (an input, someone else's file) is never touched.
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail(ErrorKind::Io, path_, ": rename failed: ", std::strerror(errno));
  committed_ = true;
  int dfd = ::open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

int remove_stale_temp_files(const std::string& path) {
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  int removed = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent_dir(target.string()), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) continue;
    if (!e.is_regular_file(ec)) continue;
    if (fs::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

void replace_file_atomically(const std::string& path, const std::function<void(const std::string& tmp)>& write) {
  AtomicFile f(path);
  write(f.temp_path());
  f.commit();
}

void write_file_atomically(const std::string& path, const std::vector<std::string>& lines) {
  AtomicFile f(path);
  std::string buf;
  for (const auto& l : lines) {
    buf += l;
    buf += '\n';
    if (buf.size() > (1 << 20)) {
      f.write(buf);
      buf.clear();
    }
  }
  f.write(buf);
  f.commit();
}

std::string parent_dir(const std::string& path) {
  auto p = fs::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

int open_owned_file(const std::string& path, int flags, const std::string& what) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) {
    const int err = errno;
    struct stat sb {};
    if (err == ELOOP) fail(ErrorKind::Usage, path, ": is a symbolic link; moerun never writes ", what, " through a link");
    // A FIFO without a reader refuses a non-blocking open for writing (ENXIO): named as what it is.
    if (::lstat(path.c_str(), &sb) == 0 && !S_ISREG(sb.st_mode))
      fail(ErrorKind::Usage, path, ": is ", kind_of(sb.st_mode), "; ", what, " must be a regular file");
    fail(ErrorKind::Io, path, ": cannot open ", what, ": ", std::strerror(err));
  }
  struct stat sb {};
  std::string why;
  if (::fstat(fd, &sb) != 0)
    why = str(": cannot stat ", what, ": ", std::strerror(errno));
  else if (!S_ISREG(sb.st_mode))
    why = str(": is ", kind_of(sb.st_mode), "; ", what, " must be a regular file");
  else if (sb.st_nlink > 1)
    why = str(": has ", sb.st_nlink, " hard links; refusing to write ", what, " into a file with another name");
  else if (sb.st_uid != ::geteuid())
    why = str(": is owned by uid ", sb.st_uid, ", not by this user; refusing to write ", what, " into it");
  if (why.empty()) return fd;
  ::close(fd);
  fail(ErrorKind::Usage, path, why);
}

void write_fully(int fd, const std::string& data, const std::string& path) {
  const char* p = data.data();
  std::size_t left = data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(ErrorKind::Io, path, ": write failed: ", std::strerror(errno));
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace moerun::io

// Result journal and atomic file writes (POSIX: open/write/fsync/rename, EINTR-safe).
#include "io/result_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/error.hpp"
#include "base/log.hpp"

namespace moerun::io {
namespace {

void write_all(int fd, const std::string& data, const std::string& path) {
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

std::string parent_dir(const std::string& path) {
  auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

}  // namespace

void check_writable(const std::string& path) {
  const std::string dir = parent_dir(path);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) fail(ErrorKind::Io, path, ": output directory ", dir, " does not exist");
  if (::access(dir.c_str(), W_OK) != 0) fail(ErrorKind::Io, path, ": output directory ", dir, " is not writable");
  if (std::filesystem::is_directory(path, ec)) fail(ErrorKind::Io, path, ": is a directory");
}

ResultJournal::ResultJournal(const std::string& output_path, bool resume) : path_(output_path + ".journal") {
  check_writable(output_path);
  if (resume) {
    std::ifstream in(path_);
    std::string line;
    int64_t n = 0, torn = 0;
    while (std::getline(in, line)) {
      Result r;
      if (result_from_json(line, &r)) {
        finished_[r.id] = std::move(r);
        ++n;
      } else {
        ++torn;
      }
    }
    if (torn) log::warn(path_, ": ignored ", torn, " incomplete journal line(s)");
    if (n) log::info("resume: ", finished_.size(), " finished request(s) in ", path_);
  }
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | (resume ? 0 : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd_ < 0) fail(ErrorKind::Io, path_, ": cannot open journal: ", std::strerror(errno));
  // A torn last line from a kill must not glue onto the next record.
  if (resume && ::lseek(fd_, 0, SEEK_END) > 0) {
    std::ifstream in(path_, std::ios::binary);
    in.seekg(-1, std::ios::end);
    char last = '\n';
    in.get(last);
    if (last != '\n') write_all(fd_, "\n", path_);
  }
}

ResultJournal::~ResultJournal() {
  if (fd_ >= 0) ::close(fd_);
}

void ResultJournal::append(const Result& r) {
  write_all(fd_, result_to_json(r) + "\n", path_);
  if (::fdatasync(fd_) != 0) fail(ErrorKind::Io, path_, ": fdatasync failed: ", std::strerror(errno));
  finished_[r.id] = r;
}

void ResultJournal::remove() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void write_file_atomically(const std::string& path, const std::vector<std::string>& lines) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorKind::Io, tmp, ": cannot create: ", std::strerror(errno));
  try {
    std::string buf;
    for (const auto& l : lines) {
      buf += l;
      buf += '\n';
      if (buf.size() > (1 << 20)) {
        write_all(fd, buf, tmp);
        buf.clear();
      }
    }
    write_all(fd, buf, tmp);
    if (::fsync(fd) != 0) fail(ErrorKind::Io, tmp, ": fsync failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(ErrorKind::Io, path, ": rename failed: ", std::strerror(err));
  }
  int dfd = ::open(parent_dir(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace moerun::io

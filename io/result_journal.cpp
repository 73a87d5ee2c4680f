// Result journal and atomic file writes (POSIX: open/write/fsync/rename, EINTR-safe).
#include "io/result_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
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

std::string journal_path(const std::string& output_path, int writer) {
  return writer == 0 ? output_path + ".journal" : output_path + ".journal." + std::to_string(writer);
}

std::vector<std::string> journal_files(const std::string& output_path) {
  const std::filesystem::path out(output_path);
  const std::string prefix = out.filename().string() + ".journal";
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(parent_dir(output_path), ec)) {
    const std::string name = e.path().filename().string();
    if (name == prefix) {
      files.push_back(e.path().string());
      continue;
    }
    if (name.rfind(prefix + ".", 0) != 0) continue;
    const std::string n = name.substr(prefix.size() + 1);
    if (!n.empty() && std::all_of(n.begin(), n.end(), ::isdigit)) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::unordered_map<std::string, Result> read_journals(const std::string& output_path, int64_t* torn) {
  std::unordered_map<std::string, Result> out;
  int64_t bad = 0;
  for (const std::string& f : journal_files(output_path)) {
    std::ifstream in(f);
    std::string line;
    while (std::getline(in, line)) {
      Result r;
      if (result_from_json(line, &r)) out[r.id] = std::move(r);
      else ++bad;
    }
  }
  if (torn) *torn = bad;
  return out;
}

void remove_journals(const std::string& output_path) {
  std::error_code ec;
  for (const std::string& f : journal_files(output_path)) std::filesystem::remove(f, ec);
}

ResultJournal::ResultJournal(const std::string& output_path, int writer, bool resume)
    : path_(journal_path(output_path, writer)) {
  check_writable(output_path);
  if (resume) {
    int64_t torn = 0;
    finished_ = read_journals(output_path, &torn);
    if (torn) log::warn(output_path, ".journal*: ignored ", torn, " incomplete journal line(s)");
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

void ResultJournal::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
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

// OutputLock: flock(2) on OUTPUT.lock. The file is unlinked by its holder while still locked; a
// process that opened the old file and then got the lock sees that its file is no longer the one
// at the path (device and inode differ) and tries again, so two runs never both hold a lock.
#include "io/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"
#include "base/log.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"

namespace moerun::io {
namespace {

std::string holder_of(int fd) {
  char buf[256] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s.empty() ? "another process" : s;
}

std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0) return "?";
  return h;
}

}  // namespace

OutputLock::OutputLock(const std::string& output) : path_(path_for(output)) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    // A FIFO or a symlink planted as OUTPUT.lock is refused, not waited on or written through.
    const int fd = open_owned_file(path_, O_RDWR | O_CREAT, "the lock of --output " + output);
    struct stat mine {};
    if (::fstat(fd, &mine) != 0) {
      ::close(fd);
      fail(ErrorKind::Io, path_, ": cannot stat the lock of --output ", output);
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {
        // Some parallel file systems refuse locks unless mounted for them (Lustre without -o flock):
        // a run there must still work, without the guard.
        ::close(fd);
        ::unlink(path_.c_str());
        log::warn(path_, ": this file system does not support file locks (", std::strerror(err),
                  "); running without the check that no other run writes --output ", output);
        return;
      }
      const std::string who = err == EWOULDBLOCK ? holder_of(fd) : "";
      ::close(fd);
      if (err == EWOULDBLOCK)
        fail(ErrorKind::Usage, "--output ", output, " is being written by another run (", who, ", lock ", path_,
             "); wait for it, or choose another --output");
      fail(ErrorKind::Io, path_, ": cannot lock: ", std::strerror(err));
    }
    struct stat now {};
    if (::stat(path_.c_str(), &now) != 0 || now.st_dev != mine.st_dev || now.st_ino != mine.st_ino) {
      ::close(fd);  // the holder removed it between our open and our lock: take the new one
      continue;
    }
    fd_ = fd;
    const std::string who = "pid " + std::to_string(::getpid()) + " on " + host_name();
    if (::ftruncate(fd_, 0) == 0) {
      try {
        write_fully(fd_, who + "\n", path_);
      } catch (const Error&) {
        // The pid is only for the message; the lock itself is held.
      }
    }
    return;
  }
  fail(ErrorKind::Io, path_, ": the lock file keeps being replaced; giving up");
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still locked: see the file comment
  ::close(fd_);
}

}  // namespace moerun::io

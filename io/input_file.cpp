// Regular-file checks and whole-file reads (POSIX: open with O_NONBLOCK, fstat, read).
#include "io/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace moerun::io {

const char* file_type_name(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a directory";
  return "not a regular file";
}

namespace {

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

std::string read_to_end(int fd, const std::string& path) {
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(ErrorKind::Io, path, ": read failed: ", std::strerror(errno));
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace

bool check_regular_file(const std::string& path, ErrorKind not_regular) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) {
    if (errno == ENOENT) return false;
    fail(ErrorKind::Io, path, ": cannot stat: ", std::strerror(errno));
  }
  if (!S_ISREG(sb.st_mode)) fail(not_regular, path, ": is ", file_type_name(sb.st_mode), ", expected a regular file");
  return true;
}

void require_input_file(const std::string& path, const std::string& option) {
  struct stat sb {};
  if (::stat(path.c_str(), &sb) != 0) fail(ErrorKind::Io, option, " ", path, ": cannot open: ", std::strerror(errno));
  if (!S_ISREG(sb.st_mode)) fail(ErrorKind::Usage, option, " ", path, ": is ", file_type_name(sb.st_mode), ", expected a regular file");
}

std::string read_regular_file(const std::string& path, ErrorKind not_regular) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EISDIR) fail(not_regular, path, ": is a directory, expected a regular file");
    fail(ErrorKind::Io, path, ": cannot open: ", std::strerror(errno));
  }
  const FdCloser closer{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) fail(ErrorKind::Io, path, ": cannot stat: ", std::strerror(errno));
  if (!S_ISREG(sb.st_mode)) fail(not_regular, path, ": is ", file_type_name(sb.st_mode), ", expected a regular file");
  return read_to_end(fd, path);
}

std::string read_stream_file(const std::string& path, const std::string& option) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, path, ": cannot open input file: ", std::strerror(errno));
  const FdCloser closer{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) fail(ErrorKind::Io, path, ": cannot stat input file: ", std::strerror(errno));
  if (S_ISDIR(sb.st_mode) || S_ISBLK(sb.st_mode))
    fail(ErrorKind::Usage, option, " ", path, ": is ", file_type_name(sb.st_mode), ", expected a file of JSON lines");
  return read_to_end(fd, path);
}

int64_t first_invalid_utf8(const std::string& text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = p[i];
    std::size_t len = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80)
      len = 1, cp = c;
    else if ((c >> 5) == 0x6)
      len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c >> 4) == 0xe)
      len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c >> 3) == 0x1e)
      len = 4, cp = c & 0x07, min = 0x10000;
    if (len == 0 || i + len > n) return static_cast<int64_t>(i);
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return static_cast<int64_t>(i);
      cp = cp << 6 | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

}  // namespace moerun::io

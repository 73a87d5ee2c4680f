// Positional reads of a local file, direct where allowed.
#include "io/positional_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/aligned_buffer.hpp"
#include "base/error.hpp"

namespace moerun::io {

uint64_t pread_full(int fd, void* dst, uint64_t n, uint64_t offset) {
  uint64_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(dst) + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<uint64_t>(r);
  }
  return got;
}

PositionalFile::PositionalFile(const std::string& path, bool direct) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail(ErrorKind::Io, path, ": cannot open: ", std::strerror(errno));
  if (direct) direct_fd_ = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);  // EINVAL on tmpfs
}

PositionalFile::~PositionalFile() {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  if (fd_ >= 0) ::close(fd_);
}

void PositionalFile::expect_random_access() const {
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
}

void PositionalFile::read(uint64_t offset, std::size_t n, void* dst) const {
  if (direct_fd_ < 0) {
    errno = 0;
    check_read(offset, n, pread_full(fd_, dst, n, offset));
    return;
  }
  thread_local AlignedBuffer bounce;
  std::memcpy(dst, read_view(offset, n, bounce), n);
}

const unsigned char* PositionalFile::read_view(uint64_t offset, std::size_t n, AlignedBuffer& scratch) const {
  errno = 0;
  if (direct_fd_ < 0) {
    if (scratch.size() < n) scratch.resize(n);
    check_read(offset, n, pread_full(fd_, scratch.data(), n, offset));
    return scratch.as<unsigned char>();
  }
  // O_DIRECT wants offset, length and memory aligned: the aligned span, the bytes asked for in it.
  const uint64_t first = offset / kDirectIoAlign * kDirectIoAlign;
  const uint64_t span = (offset + n - first + kDirectIoAlign - 1) / kDirectIoAlign * kDirectIoAlign;
  if (scratch.size() < span) scratch.resize(std::max<uint64_t>(span, AlignedBuffer::kPageAlignFrom));  // page-aligned
  const uint64_t r = pread_full(direct_fd_, scratch.data(), span, first);
  check_read(offset, n, r > offset - first ? std::min<uint64_t>(n, r - (offset - first)) : 0);
  return scratch.as<unsigned char>() + (offset - first);
}

void PositionalFile::check_read(uint64_t offset, std::size_t n, uint64_t got) const {
  if (got == n) return;
  if (errno != 0 && errno != EINTR) fail(ErrorKind::Io, path_, ": read of ", n, " bytes at ", offset, " failed: ", std::strerror(errno));
  fail(ErrorKind::BadInput, path_, ": ends before byte ", offset + n, " (truncated?)");
}

}  // namespace moerun::io

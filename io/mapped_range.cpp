// Read-only file mappings.
#include "io/mapped_range.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"

namespace moerun::io {

MappedRange::MappedRange(const std::string& path, uint64_t offset, std::size_t bytes) : bytes_(bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::Io, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || offset > static_cast<uint64_t>(st.st_size) || bytes > static_cast<uint64_t>(st.st_size) - offset) {
    ::close(fd);
    fail(ErrorKind::BadInput, path, ": ends before byte ", offset + bytes, " (truncated?)");
  }
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t first = offset / page * page;
  mapped_ = static_cast<std::size_t>(offset - first) + bytes;
  base_ = ::mmap(nullptr, mapped_, PROT_READ, MAP_PRIVATE, fd, static_cast<off_t>(first));
  const int err = errno;
  ::close(fd);  // the mapping keeps the file
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    fail(ErrorKind::Io, path, ": cannot map ", bytes, " bytes: ", std::strerror(err));
  }
  data_ = static_cast<const char*>(base_) + (offset - first);
}

MappedRange::~MappedRange() {
  if (base_) ::munmap(base_, mapped_);
}

void MappedRange::release_resident() const {
  if (base_) ::madvise(base_, mapped_, MADV_DONTNEED);
}

void MappedRange::expect_random_access() const {
  if (base_) ::madvise(base_, mapped_, MADV_RANDOM);  // advice only: a kernel that ignores it reads more
}

}  // namespace moerun::io

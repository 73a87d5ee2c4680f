// PositionalFile: a read-only local file read at byte offsets by any number of threads at once
// (pread), with O_DIRECT where the filesystem allows it: the expert shards of a local model are
// read this way (no HDF5 lock, no page cache to double what L1 holds), as the object store's
// ranged GETs read remote ones.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/aligned_buffer.hpp"

namespace moerun::io {

inline constexpr uint64_t kDirectIoAlign = 4096;

// pread until `n` bytes or the end of the file (or an error); the bytes read.
uint64_t pread_full(int fd, void* dst, uint64_t n, uint64_t offset);

class PositionalFile {
 public:
  // Io error naming `path` when it cannot be opened. `direct`: O_DIRECT reads where the file system
  // takes them (tmpfs does not: then through the page cache).
  PositionalFile(const std::string& path, bool direct);
  ~PositionalFile();
  PositionalFile(const PositionalFile&) = delete;
  PositionalFile& operator=(const PositionalFile&) = delete;

  // Reads [offset, offset + n) into dst; BadInput naming the file when it ends first, Io on a
  // read error. With O_DIRECT the aligned span around it goes through a per-thread buffer.
  void read(uint64_t offset, std::size_t n, void* dst) const;
  // The same bytes without the copy out of the aligned span: read into `scratch` (resized as
  // needed, kept from call to call) and returned where they start in it.
  const unsigned char* read_view(uint64_t offset, std::size_t n, AlignedBuffer& scratch) const;
  // Reads through the page cache will be small and scattered (embedding rows): no read-ahead
  // around them (this project's virtio disk reads ahead 8 MiB, which under a memory limit pushed
  // the running code out of the page cache). Advice only.
  void expect_random_access() const;
  bool direct() const { return direct_fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  void check_read(uint64_t offset, std::size_t n, uint64_t got) const;  // BadInput or Io unless all n came
  std::string path_;
  int fd_ = -1, direct_fd_ = -1;
};

}  // namespace moerun::io

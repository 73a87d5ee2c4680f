// MappedRange: a byte range of a local file mapped read-only (mmap). The token embedding lives
// this way (issue 41): a lookup brings in the rows it uses, and under memory pressure the kernel
// drops clean pages instead of the process being charged for the whole table. The file must not be
// truncated while mapped (a read past its new end is SIGBUS, as for any mmap reader).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace moerun::io {

class MappedRange {
 public:
  // Io error naming `path` when it cannot be opened or mapped; BadInput when the range is past its end.
  MappedRange(const std::string& path, uint64_t offset, std::size_t bytes);
  ~MappedRange();
  MappedRange(const MappedRange&) = delete;
  MappedRange& operator=(const MappedRange&) = delete;

  const void* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  // Drops the pages from this process's resident set (they stay in the page cache until reclaimed;
  // the next read faults them in again): after a full scan such as a checksum.
  void release_resident() const;
  // Lookups that touch a row here and there: a fault reads its own pages only. Without this a fault
  // reads around it by the device's read-ahead (8 MiB on a virtio disk), so each embedding lookup
  // read megabytes, and under a memory limit those pages evicted the code being run.
  void expect_random_access() const;

 private:
  void* base_ = nullptr;
  std::size_t mapped_ = 0, bytes_ = 0;
  const void* data_ = nullptr;
};

}  // namespace moerun::io

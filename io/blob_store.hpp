// The L2 tier (DESIGN §5): expert raw bytes in one packed blob file on local disk plus an index
// (expert -> offset, size, xxh64), in --l2-dir. Entries are page-aligned and read with pread,
// O_DIRECT where the filesystem allows it (bypassing the page cache, as on NVMe). The index is
// rewritten atomically after each added entry, so a restart finds every complete entry and starts
// warm; a torn or corrupt entry fails its checksum on read, is dropped and counted, and the caller
// refetches it from L3. When the budget or the disk is full, puts stop (one warning) and the run
// continues from L3.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "base/aligned_buffer.hpp"

namespace moerun::io {

struct BlobEntry {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t xxh64 = 0;
};

class BlobStore {
 public:
  // Opens (or creates) DIR/experts.blob and DIR/index.json; entries that reach past the end of the
  // blob file are dropped. `max_bytes` bounds the blob file. `direct`: read with O_DIRECT where the
  // filesystem allows (false: through the page cache).
  BlobStore(const std::string& dir, int64_t max_bytes, bool direct = true);
  ~BlobStore();
  BlobStore(const BlobStore&) = delete;
  BlobStore& operator=(const BlobStore&) = delete;

  // Reads the expert's bytes into `into` (its allocation is reused when big enough) and returns true
  // if present and intact (xxh64 equal to the index's and to `expected`); false otherwise (a
  // corrupt entry is dropped from the index and counted).
  bool read(int64_t layer, int64_t expert, uint64_t expected_xxh64, AlignedBuffer& into);
  // Adds an entry; false when it does not fit (budget, disk full), after one warning.
  bool put(int64_t layer, int64_t expert, const void* data, std::size_t size, uint64_t xxh64);

  bool has(int64_t layer, int64_t expert) const;
  int64_t entries() const;
  int64_t corrupt_dropped() const;
  bool direct_io() const { return direct_; }
  const std::string& dir() const { return dir_; }

 private:
  void write_index_locked();

  std::string dir_, blob_path_, index_path_;
  int64_t max_bytes_;
  int fd_ = -1;         // buffered, for writes (and reads when O_DIRECT is refused)
  int direct_fd_ = -1;  // O_DIRECT, for reads
  bool direct_ = false;
  mutable std::mutex mu_;
  std::map<std::pair<int64_t, int64_t>, BlobEntry> index_;
  uint64_t end_ = 0;    // next free (page-aligned) offset
  int64_t corrupt_ = 0;
  bool full_warned_ = false;
};

}  // namespace moerun::io

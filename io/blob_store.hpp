// The L2 tier (DESIGN §5): experts in one blob file on local disk plus an index (expert -> offset,
// part sizes, xxh64), in --l2-dir. The cache stores experts in the form L1 uses (packed for the
// GEMMs), as parts (one per matrix) that each start on a page, so an L2 hit reads every part straight
// into its L1 buffer with pread, with O_DIRECT where the filesystem allows it (bypassing the page
// cache, as on NVMe). The index records the layout of the stored form; a store opened with another
// layout (another oneDNN, CPU or model shape) starts empty. The index is rewritten atomically after
// each added entry, so a restart finds every complete entry and starts warm; a torn or corrupt
// entry fails its checksum on read, is dropped and counted, and the caller refetches it from L3.
// When the budget or the disk is full, puts stop (one warning) and the run continues from L3.
// DIR is private (made 0700, or checked: a real directory of this user that nobody else may write)
// and its files are opened by the one rule of io/output_file.hpp, so nothing planted there is
// written through. One run writes a DIR at a time (flock on the blob): a second run that finds it
// held reads the entries it holds and adds none.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace moerun::io {

struct BlobEntry {
  uint64_t offset = 0;
  std::vector<uint64_t> parts;  // bytes of each part; part i starts on the page after part i-1
  uint64_t xxh64 = 0;  // of the parts' bytes, in order
  uint64_t source_xxh64 = 0;  // the expert's checksum in the model (ties the entry to the model)
  uint64_t span() const;  // bytes from offset to the end of the last part
};

struct BlobPart {
  void* data;
  std::size_t size;  // bytes to read; `data` must have room for size rounded up to a page for O_DIRECT
  std::size_t capacity;
};
struct ConstBlobPart {
  const void* data;
  std::size_t size;
};

class BlobStore {
 public:
  // Opens (or creates) DIR/experts.blob and DIR/index.json. Entries of another `layout`, or that
  // reach past the end of the blob file, are dropped. `max_bytes` bounds the blob file. `direct`:
  // read with O_DIRECT where the filesystem allows (false: through the page cache).
  BlobStore(const std::string& dir, int64_t max_bytes, const std::string& layout, bool direct = true);
  ~BlobStore();
  BlobStore(const BlobStore&) = delete;
  BlobStore& operator=(const BlobStore&) = delete;

  // Reads the expert's parts into `into` (same count and sizes as stored) and returns true if present
  // and intact (xxh64 of what was read equal to the index's, and the entry made from the model
  // expert whose checksum is `source_xxh64`); false otherwise (a corrupt entry is dropped and counted).
  bool read(int64_t layer, int64_t expert, uint64_t source_xxh64, const std::vector<BlobPart>& into);
  // Adds an entry; false when it does not fit (budget, disk full), after one warning.
  bool put(int64_t layer, int64_t expert, const std::vector<ConstBlobPart>& parts, uint64_t source_xxh64);

  // Removes an entry whose expert has new weights (a hot swap); no warning, not counted as corrupt.
  void forget(int64_t layer, int64_t expert);
  bool has(int64_t layer, int64_t expert) const;
  int64_t entries() const;
  int64_t corrupt_dropped() const;
  bool direct_io() const { return direct_; }
  bool read_only() const { return read_only_; }  // another run holds DIR
  const std::string& dir() const { return dir_; }

 private:
  void write_index_locked();
  bool drop_locked(int64_t layer, int64_t expert, const char* why);
  // The page cache of the last entry written: its writeback is started at once, and it is waited
  // for and dropped at the next put (or at close), so L2's writes keep at most one entry's pages,
  // dirty or clean, in this process's memory (a cgroup limit counts them) without a loader waiting
  // on the disk for the entry it just wrote.
  void settle_written_locked();

  std::string dir_, blob_path_, index_path_, layout_;
  int64_t max_bytes_;
  int fd_ = -1;  // buffered, for writes (and reads when O_DIRECT is refused)
  int direct_fd_ = -1;  // O_DIRECT, for reads
  bool direct_ = false;
  bool read_only_ = false;
  mutable std::mutex mu_;
  std::map<std::pair<int64_t, int64_t>, BlobEntry> index_;
  uint64_t end_ = 0;  // next free (page-aligned) offset
  uint64_t written_offset_ = 0, written_bytes_ = 0;  // the last entry written, not yet settled
  int64_t corrupt_ = 0;
  bool full_warned_ = false;
};

}  // namespace moerun::io

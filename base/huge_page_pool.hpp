// HugePagePool: host memory for the weights a decode step streams, carved from 2 MiB-aligned regions
// advised MADV_HUGEPAGE. One sequence's decode step reads every active weight once (~93 MB at q8 on
// the Qwen3-MoE bench shape): in 4 KiB pages that is ~23k TLB misses a token, each a page walk
// (two-level in a VM). Two threads reading a 96 MB buffer here: 31-33 GB/s in 4 KiB pages, 37-40
// GB/s in 2 MiB ones. An expert (~1.2 MB at q8) is smaller than a huge page, so the pool packs many
// into one region instead of giving each its own mapping.
#pragma once
#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace moerun {

class HugePagePool {
 public:
  static constexpr std::size_t kHugePage = std::size_t{2} << 20;
  static constexpr std::size_t kAlign = 4096;  // O_DIRECT reads land in pooled buffers (L2 hits)

  // Regions of at least `region_bytes` (rounded up to huge pages) are mapped as needed.
  explicit HugePagePool(std::size_t region_bytes = std::size_t{64} << 20);
  HugePagePool(const HugePagePool&) = delete;
  HugePagePool& operator=(const HugePagePool&) = delete;
  ~HugePagePool();  // unmaps every region: whatever was carved from it must be gone

  // What a block for `bytes` takes: rounded up to kAlign (what AlignedBuffer counts as its capacity).
  static std::size_t block_bytes(std::size_t bytes) { return ((bytes ? bytes : 1) + kAlign - 1) / kAlign * kAlign; }

  // block_bytes(bytes), kAlign-aligned; throws std::bad_alloc when no region can be mapped.
  // Thread-safe (I/O threads allocate experts while another thread computes).
  void* allocate(std::size_t bytes);
  // Gives back what allocate(bytes) returned: kept for the next allocation of that size (an
  // expert's matrices come and go in a few sizes), never unmapped before the pool goes; the pages
  // of a block of kHugePage bytes or more leave RSS now.
  void release(void* p, std::size_t bytes);

  // Whether the kernel took the huge-page advice for the regions (false where THP is off or absent:
  // the memory is then ordinary pages, and works the same).
  bool advised() const;
  std::size_t mapped_bytes() const;  // address space of all regions (pages are faulted in on use)

 private:
  struct Region {
    void* base;
    std::size_t bytes;
  };
  mutable std::mutex mu_;
  std::size_t region_bytes_;
  std::vector<Region> regions_;
  char* next_ = nullptr;  // the newest region's unused tail
  std::size_t left_ = 0;
  bool advised_ = true;
  std::unordered_map<std::size_t, std::vector<void*>> free_;  // released blocks, by size
};

}  // namespace moerun

// HugePagePool: 2 MiB-aligned anonymous regions advised MADV_HUGEPAGE, carved front to back, with
// released blocks kept by size.
#include "base/huge_page_pool.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace moerun {

namespace {
std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}
}  // namespace

HugePagePool::HugePagePool(std::size_t region_bytes) : region_bytes_(round_up(region_bytes, kHugePage)) {}

HugePagePool::~HugePagePool() {
  for (const Region& r : regions_) munmap(r.base, r.bytes);
}

void* HugePagePool::allocate(std::size_t bytes) {
  bytes = block_bytes(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_.find(bytes);
  if (it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  if (bytes > left_) {
    // A new region, aligned by over-mapping a huge page and trimming both ends; the old region's
    // tail stays unused (address space only: its pages were never touched).
    const std::size_t size = std::max(region_bytes_, round_up(bytes, kHugePage));
    void* raw = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const auto start = reinterpret_cast<std::uintptr_t>(raw);
    const std::uintptr_t aligned = round_up(start, kHugePage);
    if (aligned > start) munmap(raw, aligned - start);
    if (const std::size_t tail = start + size + kHugePage - (aligned + size); tail > 0)
      munmap(reinterpret_cast<void*>(aligned + size), tail);
    if (madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE) != 0) advised_ = false;
    regions_.push_back({reinterpret_cast<void*>(aligned), size});
    next_ = reinterpret_cast<char*>(aligned);
    left_ = size;
  }
  void* p = next_;
  next_ += bytes;
  left_ -= bytes;
  return p;
}

void HugePagePool::release(void* p, std::size_t bytes) {
  if (!p) return;
  bytes = block_bytes(bytes);
  // A block of a huge page or more gives its pages back, as free() does a large block: a matrix
  // packed from a plain copy in the pool must not keep the copy resident (memory budgets count
  // RSS). Smaller ones (an expert's matrices) stay: giving back part of a huge page splits it, and
  // at exit 1,536 such calls took longer than the unmapping that follows.
  if (bytes >= kHugePage) madvise(p, bytes, MADV_DONTNEED);
  std::lock_guard<std::mutex> lock(mu_);
  free_[bytes].push_back(p);
}

bool HugePagePool::advised() const {
  std::lock_guard<std::mutex> lock(mu_);
  return advised_;
}

std::size_t HugePagePool::mapped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t n = 0;
  for (const Region& r : regions_) n += r.bytes;
  return n;
}

}  // namespace moerun

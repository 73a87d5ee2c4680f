// AlignedBuffer: an owned, 64-byte aligned byte buffer (cache lines and AVX-512 loads), the storage
// of weight matrices and activation scratch. Weights that stream every step are placed in a
// HugePagePool (place_in); everything else comes from the C heap.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <utility>

#include "base/huge_page_pool.hpp"

namespace moerun {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes) { resize(bytes); }
  // An empty buffer whose allocations come from `pool` (none: the C heap).
  explicit AlignedBuffer(std::shared_ptr<HugePagePool> pool) : pool_(std::move(pool)) {}
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)),
        pool_(std::move(o.pool_)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      deallocate();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
      pool_ = std::move(o.pool_);
    }
    return *this;
  }
  ~AlignedBuffer() { deallocate(); }

  // Grows (never shrinks the allocation); contents are not preserved.
  void resize(std::size_t bytes) {
    if (bytes <= capacity_) {
      size_ = bytes;
      return;
    }
    deallocate();
    if (pool_) {
      capacity_ = HugePagePool::block_bytes(bytes);
      data_ = pool_->allocate(capacity_);
    } else {
      // Large buffers are page-aligned with page-multiple capacity, so O_DIRECT can read into them.
      const std::size_t align = bytes >= kPageAlignFrom ? 4096 : 64;
      capacity_ = (bytes + align - 1) / align * align;
      data_ = std::aligned_alloc(align, capacity_ ? capacity_ : align);
      if (!data_) throw std::bad_alloc();
    }
    size_ = bytes;
  }
  // From now on allocations come from `pool`; the contents are dropped.
  void place_in(std::shared_ptr<HugePagePool> pool) {
    deallocate();
    pool_ = std::move(pool);
  }
  const std::shared_ptr<HugePagePool>& pool() const { return pool_; }

  static constexpr std::size_t kPageAlignFrom = std::size_t{1} << 16;
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T>
  T* as() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data_);
  }

 private:
  void deallocate() {
    if (pool_)
      pool_->release(data_, capacity_);
    else
      std::free(data_);
    data_ = nullptr;
    size_ = capacity_ = 0;
  }

  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
  std::shared_ptr<HugePagePool> pool_;
};

}  // namespace moerun

// AlignedBuffer: an owned, 64-byte aligned byte buffer (cache lines and AVX-512 loads), the storage
// of weight matrices and activation scratch.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace moerun {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t bytes) { resize(bytes); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        capacity_(std::exchange(o.capacity_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    if (this != &o) {
      std::free(data_);
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
    }
    return *this;
  }
  ~AlignedBuffer() { std::free(data_); }

  // Grows (never shrinks the allocation); contents are not preserved.
  void resize(std::size_t bytes) {
    if (bytes <= capacity_) {
      size_ = bytes;
      return;
    }
    std::free(data_);
    // Large buffers are page-aligned with page-multiple capacity, so O_DIRECT can read into them.
    const std::size_t align = bytes >= kPageAlignFrom ? 4096 : 64;
    capacity_ = (bytes + align - 1) / align * align;
    data_ = std::aligned_alloc(align, capacity_ ? capacity_ : align);
    if (!data_) throw std::bad_alloc();
    size_ = bytes;
  }

  static constexpr std::size_t kPageAlignFrom = std::size_t{1} << 16;
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  void* data() { return data_; }
  const void* data() const { return data_; }
  template <typename T> T* as() { return static_cast<T*>(data_); }
  template <typename T> const T* as() const { return static_cast<const T*>(data_); }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

}  // namespace moerun

// RAII handles for the CUDA runtime objects moerun owns: device and pinned host buffers, streams and
// events. Creation failures throw through CUDA_CHECK; destruction never throws (errors at process
// exit, when the runtime may already be unloading, are ignored). Only for code built with CUDA.
#pragma once
#include <cstddef>
#include <utility>

#include "base/cuda_check.hpp"

namespace moerun::cuda {

template <typename Traits>
class Handle {
 public:
  using T = typename Traits::Type;
  Handle() = default;
  explicit Handle(T h) : h_(h) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (h_) Traits::destroy(h_);
    h_ = T{};
  }
  T get() const { return h_; }
  explicit operator bool() const { return h_ != T{}; }

 private:
  T h_{};
};

struct StreamTraits {
  using Type = cudaStream_t;
  static void destroy(cudaStream_t s) { (void)cudaStreamDestroy(s); }
};
struct EventTraits {
  using Type = cudaEvent_t;
  static void destroy(cudaEvent_t e) { (void)cudaEventDestroy(e); }
};
using Stream = Handle<StreamTraits>;
using Event = Handle<EventTraits>;

inline Stream make_stream() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return Stream(s);
}
// Events order work between streams; timing ones also measure it.
inline Event make_event(bool timing = false) {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return Event(e);
}

// Device memory (cudaMalloc) or pinned host memory (cudaMallocHost), grown on demand.
template <bool Pinned>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes) { resize(bytes); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  ~Buffer() { release(); }
  // Grows (contents not kept); never shrinks.
  void resize(std::size_t bytes) {
    if (bytes <= bytes_) return;
    release();
    if constexpr (Pinned)
      CUDA_CHECK(cudaMallocHost(&p_, bytes));
    else
      CUDA_CHECK(cudaMalloc(&p_, bytes));
    bytes_ = bytes;
  }
  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (!p_) return;
    if constexpr (Pinned)
      (void)cudaFreeHost(p_);
    else
      (void)cudaFree(p_);
    p_ = nullptr;
    bytes_ = 0;
  }
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};
using DeviceBuffer = Buffer<false>;
using PinnedBuffer = Buffer<true>;

}  // namespace moerun::cuda

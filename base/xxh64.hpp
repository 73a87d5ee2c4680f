// Streaming xxh64 with seed 0: the expert checksum of the model format (DESIGN §3) and the
// fingerprints of requests and runs in result journals.
#pragma once
#include <xxhash.h>

#include <cstdint>
#include <string>
#include <vector>

namespace moerun {

class Xxh64 {
 public:
  Xxh64() : st_(XXH64_createState()) { XXH64_reset(st_, 0); }
  ~Xxh64() { XXH64_freeState(st_); }
  Xxh64(const Xxh64&) = delete;
  Xxh64& operator=(const Xxh64&) = delete;

  Xxh64& bytes(const void* p, std::size_t n) {
    XXH64_update(st_, p, n);
    return *this;
  }
  template <typename T>
  Xxh64& value(const T& v) {
    return bytes(&v, sizeof v);
  }
  // Length-prefixed, so that ("ab", "c") and ("a", "bc") differ.
  Xxh64& text(const std::string& s) {
    value(s.size());
    return bytes(s.data(), s.size());
  }
  template <typename T>
  Xxh64& vec(const std::vector<T>& v) {
    value(v.size());
    return bytes(v.data(), v.size() * sizeof(T));
  }
  uint64_t digest() const { return XXH64_digest(st_); }

 private:
  XXH64_state_t* st_;
};

}  // namespace moerun

// Where a buffer lives: the memory kinds that expert backends allocate and exchanges move. Host is
// pageable memory, Pinned is page-locked host memory a GPU copies from directly, Device is GPU memory.
#pragma once

namespace moerun {

enum class MemoryKind { Host, Pinned, Device };

inline const char* memory_kind_name(MemoryKind k) {
  switch (k) {
    case MemoryKind::Host: return "host";
    case MemoryKind::Pinned: return "pinned";
    case MemoryKind::Device: return "device";
  }
  return "?";
}

}  // namespace moerun

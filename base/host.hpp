// What this host has, for checks made before large allocations (a model whose files claim more
// than the machine holds fails with a clear message instead of being killed for memory).
#pragma once
#include <cstdint>

namespace moerun {

// Physical memory in bytes (0 when unknown).
int64_t host_memory_bytes();
// The address-space limit (RLIMIT_AS, ulimit -v) in bytes; 0 when unlimited.
int64_t address_space_limit_bytes();
// What this process can still map: physical memory, or under an address-space limit (ulimit -v)
// the limit less what is mapped now, whichever is less (0 when unknown).
int64_t mappable_memory_bytes();

}  // namespace moerun

// What this host has, for checks made before large allocations (a model whose files claim more
// than the machine holds fails with a clear message instead of being killed for memory).
#pragma once
#include <cstdint>
#include <string>

namespace moerun {

// Physical memory in bytes (0 when unknown).
int64_t host_memory_bytes();
// The address-space limit (RLIMIT_AS, ulimit -v) in bytes; 0 when unlimited.
int64_t address_space_limit_bytes();
// What this process can still map: physical memory, or under an address-space limit (ulimit -v)
// the limit less what is mapped now, whichever is less (0 when unknown).
int64_t mappable_memory_bytes();
// This process's resident set (/proc/self/statm) in bytes.
int64_t resident_memory_bytes();
// Hands the heap's free pages back to the system (malloc_trim): after loading, the buffers weights
// were read into would otherwise stay resident (launch keeps freed memory for the steps' reuse).
void release_freed_memory();
// Freed memory goes back to the system again (blocks of 1 MiB and more mapped on their own, at most
// 16 MiB free at a heap's top) instead of launch's keep-everything setting: under a memory budget
// the expert loaders' freed buffers piled up in their malloc arenas (measured: 93 MiB more RSS
// with 57 MiB of L1, tests/integration/memory_budget.sh's model).
void bound_freed_memory();
// MemAvailable of /proc/meminfo in bytes (0 when unknown).
int64_t available_memory_bytes();
// The tightest memory limit of this process's control group and its ancestors (cgroup v1
// memory.limit_in_bytes, v2 memory.max); 0 when there is none.
int64_t cgroup_memory_limit_bytes();
// The same for a group as /proc/PID/cgroup's text names it, with the cgroup mounts under `root`
// (v1 controllers in ROOT/memory, v2 in ROOT or ROOT/unified).
int64_t cgroup_memory_limit_bytes(const std::string& proc_cgroup_text, const std::string& root);

}  // namespace moerun

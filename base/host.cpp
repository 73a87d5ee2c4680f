// Host facts from sysconf, getrlimit and /proc/self/statm.
#include "base/host.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace moerun {

int64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

int64_t address_space_limit_bytes() {
  rlimit as{};
  return ::getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY ? static_cast<int64_t>(as.rlim_cur) : 0;
}

int64_t mappable_memory_bytes() {
  const int64_t physical = host_memory_bytes(), limit = address_space_limit_bytes();
  if (limit == 0) return physical;
  // /proc/self/statm: the first field is the mapped size in pages.
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  const int64_t room = std::max<int64_t>(0, limit - static_cast<int64_t>(pages) * ::sysconf(_SC_PAGESIZE));
  return physical > 0 ? std::min(physical, room) : room;
}

}  // namespace moerun

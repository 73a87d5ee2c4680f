// Host facts from sysconf, getrlimit, /proc (statm, meminfo, cgroup) and the cgroup files.
#include "base/host.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace moerun {

namespace {
// The first field of /proc/self/statm at `index` (0: mapped size, 1: resident), in bytes.
int64_t statm_bytes(int index) {
  long v[2] = {0, 0};
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &v[0], &v[1]) != 2) v[0] = v[1] = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(v[index]) * ::sysconf(_SC_PAGESIZE);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return in ? s.str() : std::string();
}

// A limit file's value: a byte count, or 0 for none ("max", v1's near-2^63 "unlimited", unreadable).
int64_t limit_value(const std::string& text) {
  if (text.empty() || text.compare(0, 3, "max") == 0) return 0;
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno || end == text.c_str() || v >= (1ull << 62)) return 0;
  return static_cast<int64_t>(v);
}

int64_t tighter(int64_t a, int64_t b) {
  return a == 0 ? b : b == 0 ? a : std::min(a, b);
}
}  // namespace

int64_t resident_memory_bytes() {
  return statm_bytes(1);
}

void release_freed_memory() {
  ::malloc_trim(0);
}

void bound_freed_memory() {
  ::mallopt(M_MMAP_THRESHOLD, 1 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 16 << 20);
  ::malloc_trim(0);
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

int64_t cgroup_memory_limit_bytes() {
  return cgroup_memory_limit_bytes(read_text("/proc/self/cgroup"), "/sys/fs/cgroup");
}

int64_t cgroup_memory_limit_bytes(const std::string& proc_cgroup_text, const std::string& root) {
  // Lines "N:memory:/path" (v1) or "0::/path" (v2). A limit on any ancestor applies, so every level
  // from the process's group up to the root is read.
  std::istringstream in(proc_cgroup_text);
  std::string line;
  int64_t limit = 0;
  while (std::getline(in, line)) {
    const std::size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const bool v1 = controllers == "memory" || controllers.find("memory,") == 0 || controllers.find(",memory") != std::string::npos;
    if (!v1 && !controllers.empty()) continue;
    std::filesystem::path dir = line.substr(b + 1);
    for (;;) {
      if (v1) {
        limit = tighter(limit, limit_value(read_text(root + "/memory" + dir.string() + "/memory.limit_in_bytes")));
      } else {
        for (const char* mount : {"", "/unified"})
          limit = tighter(limit, limit_value(read_text(root + mount + dir.string() + "/memory.max")));
      }
      if (dir == dir.root_path() || dir.empty()) break;
      dir = dir.parent_path();
    }
  }
  return limit;
}

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
  const int64_t room = std::max<int64_t>(0, limit - statm_bytes(0));
  return physical > 0 ? std::min(physical, room) : room;
}

}  // namespace moerun

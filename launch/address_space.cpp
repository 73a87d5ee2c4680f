// Address-space limit: the floor check, the arena cap and the early OpenMP threads.
#include "launch/address_space.hpp"

#include <malloc.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>

#include "base/error.hpp"
#include "base/host.hpp"

namespace moerun::launch {
namespace {

// Libraries, MPI (its shared-memory segments and PMIx store) and the step buffers of a small
// model. Measured with a tiny model (tests/integration/address_space_limits.sh): failures of every
// kind up to ~290 MB, none from ~300 MB with one arena; the floor keeps a margin over that.
constexpr int64_t kBaseBytes = int64_t{448} << 20;
constexpr int64_t kDefaultStackBytes = int64_t{8} << 20;

}  // namespace

void fit_address_space_limit() {
  const int64_t limit = address_space_limit_bytes();
  if (limit == 0) return;
  // libgomp gives its threads the default pthread stack: RLIMIT_STACK's soft limit (8 MiB).
  rlimit st{};
  const int64_t stack = ::getrlimit(RLIMIT_STACK, &st) == 0 && st.rlim_cur != RLIM_INFINITY
                            ? std::min<int64_t>(static_cast<int64_t>(st.rlim_cur), int64_t{1} << 30)
                            : kDefaultStackBytes;
  const int threads = omp_get_max_threads();
  const int64_t floor = kBaseBytes + threads * stack;
  if (limit < floor)
    fail(ErrorKind::Usage, "the address-space limit (ulimit -v) is ", limit >> 20, " MiB; moerun needs at least ", floor >> 20,
         " MiB of address space to start (libraries, MPI, a stack for each of ", threads,
         " OpenMP threads) plus its model: raise the limit, or bound memory with a cgroup");
  // One arena: each further one reserves 64 MiB of address space that the weights could use.
  mallopt(M_ARENA_MAX, 1);
  // Threads made now, while the address space is still free; later parallel regions reuse them.
#pragma omp parallel
  { (void)omp_get_thread_num(); }
}

}  // namespace moerun::launch

// Backoff for polling loops (MPI_Test, ucp_worker_progress): spin briefly, then yield the core, then
// sleep. Ranks often outnumber cores (virtual nodes, routers beside expert ranks); a rank that
// spins on a core holds up the peer it is waiting for.
#pragma once
#include <sched.h>

#include <chrono>
#include <thread>

namespace moerun::comm {

class Backoff {
 public:
  void pause() {
    ++n_;
    if (n_ < 64) return;
    if (n_ < 4096) {
      sched_yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  void reset() { n_ = 0; }

 private:
  int n_ = 0;
};

}  // namespace moerun::comm

// CollectiveDeadline: a condition-variable wait with a deadline on a thread of its own.
#include "comm/collective_deadline.hpp"

#include <chrono>
#include <cstdio>

#include "comm/mpi.hpp"

namespace moerun::comm {

CollectiveDeadline::CollectiveDeadline(double timeout_s, std::string what, int rank) {
  if (!(timeout_s > 0)) return;
  // Rank 0 speaks first; the others give its report (and its MPI_Abort) time to arrive.
  const double wait_s = timeout_s + (rank == 0 ? 0.0 : 5.0);
  watch_ = std::thread([this, wait_s, timeout_s, what = std::move(what), rank] {
    std::unique_lock<std::mutex> lock(m_);
    if (cv_.wait_for(lock, std::chrono::duration<double>(wait_s), [this] { return done_; })) return;
    std::fprintf(stderr,
                 "moerun: error: %sno progress for %g s in %s; a rank has stopped, died or is slower than that "
                 "(--comm-timeout)\n",
                 rank == 0 ? "" : ("rank " + std::to_string(rank) + ": ").c_str(), timeout_s, what.c_str());
    std::fflush(stderr);
    MpiSession::abort(static_cast<int>(ErrorKind::Comm));
  });
}

CollectiveDeadline::~CollectiveDeadline() {
  if (!watch_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(m_);
    done_ = true;
  }
  cv_.notify_all();
  watch_.join();
}

}  // namespace moerun::comm

// A deadline for the set-up collectives that cannot time out themselves (communicator creation,
// MPI_Comm_split_type, shared windows, UCX address exchange): a watchdog thread that, if the
// scope is still open after timeout_s, reports which step stalled and ends the job with the Comm
// exit code. These calls give no way to ask whom they wait for; the timed collectives
// (collectives.hpp) name the rank and run first wherever they can.
#pragma once
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace moerun::comm {

class CollectiveDeadline {
 public:
  // timeout_s <= 0: no deadline.
  CollectiveDeadline(double timeout_s, std::string what, int rank);
  ~CollectiveDeadline();
  CollectiveDeadline(const CollectiveDeadline&) = delete;
  CollectiveDeadline& operator=(const CollectiveDeadline&) = delete;

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watch_;
};

}  // namespace moerun::comm

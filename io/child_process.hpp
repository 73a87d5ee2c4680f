// A child process with pipes, for the helpers moerun runs beside itself (the HDF5 probe, the Python
// tokenizer). Started with posix_spawn, which is safe in an MPI process (no fork of a large address
// space with registered memory). Its stderr is always captured, so a helper's warnings never reach
// the user's terminal unasked; stdin and stdout are pipes or /dev/null.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace moerun::io {

class ChildProcess {
 public:
  struct Exit {
    bool timed_out = false;  // killed after the deadline
    int code = -1;  // exit status when it exited
    int signal = 0;  // the signal that ended it, else 0
    std::string err;  // what it wrote to stderr (the first MiB)
  };

  // argv[0] is the program: a path, or a name looked up in PATH. Io error when it cannot be started.
  ChildProcess(const std::vector<std::string>& argv, bool pipe_stdin, bool pipe_stdout);
  ~ChildProcess();  // kills it if still running
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // One line to its stdin (a newline is added). Io error if it has gone.
  void write_line(const std::string& line);
  // One line from its stdout (without the newline), waiting at most timeout_s. Io error naming
  // `what` on end of output (its last stderr line included) or on timeout.
  std::string read_line(double timeout_s, const std::string& what);
  // Closes its stdin, waits up to timeout_s for it to exit (then SIGKILL), collecting stderr.
  Exit wait(double timeout_s);

 private:
  void drain(int timeout_ms);  // reads what stdout/stderr have ready into the buffers
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  std::string out_buf_, err_buf_;
  bool out_eof_ = false, err_eof_ = false, reaped_ = false;
  int status_ = 0;
};

}  // namespace moerun::io

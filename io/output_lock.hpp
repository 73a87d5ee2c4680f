// One writer per output: an advisory lock (flock) on OUTPUT.lock, held for the whole run, so a
// second run given the same --output stops at once instead of deleting the first one's journal.
// The file records the holder's pid and host for the message; it is removed when the holder ends.
#pragma once
#include <string>

namespace moerun::io {

class OutputLock {
 public:
  // Takes the lock of `output` (its OUTPUT.lock). Held by another process: Usage error naming the
  // output, the holder's pid and host. The lock file must be a regular file (Usage otherwise). On
  // a file system without locks (flock: ENOSYS, EOPNOTSUPP, ENOLCK) one warning, and no lock.
  explicit OutputLock(const std::string& output);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  static std::string path_for(const std::string& output) { return output + ".lock"; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace moerun::io

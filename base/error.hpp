// moerun::Error: the one exception type of the project. It carries the exit-code category that
// DESIGN §7 documents, so main() can turn any failure into one line and the right exit status.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace moerun {

// Exit codes are part of the CLI contract (DESIGN §7).
enum class ErrorKind : int {
  Internal = 1,  // a bug or an unexpected library failure
  Usage = 2,     // bad command line or configuration
  BadInput = 3,  // malformed model, requests or placement
  Io = 4,        // missing or unreadable/unwritable files, object store unreachable
  Comm = 5,      // communication failure between ranks
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

// Concatenate anything streamable into a string (messages are built on error paths only).
// An error another rank (or an earlier line) already reported: exit with its code, print nothing.
class ReportedError : public Error {
 public:
  explicit ReportedError(ErrorKind kind) : Error(kind, "") {}
};

template <typename... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, const Args&... args) {
  throw Error(kind, str(args...));
}

}  // namespace moerun

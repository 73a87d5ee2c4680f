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
  Usage = 2,  // bad command line or configuration
  BadInput = 3,  // malformed model, requests or placement
  Io = 4,  // missing or unreadable/unwritable files, object store unreachable
  Comm = 5,  // communication failure between ranks
};

// `s` with every byte that is not part of a printable UTF-8 character written as \xNN: messages
// quote names and values read from input files, and a corrupt file must not put control bytes,
// line breaks or broken UTF-8 into the one error line.
inline std::string printable(const std::string& s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= n && (len > 1 || (c >= 0x20 && c != 0x7f));
    for (std::size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xc0) == 0x80;
    if (ok && len == 2) ok = c >= 0xc2;  // no overlong forms
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
      ++i;
    }
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& what) : std::runtime_error(printable(what)), kind_(kind) {}
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

namespace moerun {

// A configuration value out of range, naming the config field ("router.top_p_experts") rather
// than a command-line flag: the engine is embedded without a CLI. What a caller shows is its own
// business (launch/ maps fields to its flags, config_error_text); what() names the field.
class ConfigError : public Error {
 public:
  ConfigError(std::string field, const std::string& detail)
      : Error(ErrorKind::Usage, field + " " + detail), field_(std::move(field)), detail_(printable(detail)) {}
  const std::string& field() const { return field_; }
  const std::string& detail() const { return detail_; }  // "must be >= 1, not 0"

 private:
  std::string field_, detail_;
};

// Runs a sub-config's validate(); its ConfigError gets the sub-config's name in front of the field.
template <typename F>
void validate_part(const char* part, F&& validate) {
  try {
    validate();
  } catch (const ConfigError& e) {
    throw ConfigError(str(part, ".", e.field()), e.detail());
  }
}

template <typename... Args>
[[noreturn]] void fail_config(const std::string& field, const Args&... args) {
  throw ConfigError(field, str(args...));
}

}  // namespace moerun

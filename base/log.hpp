// The logger: the one global of the project. Level from MOERUN_LOG=warn|info|debug (default info);
// messages go to stderr with the rank prefix set at start-up; data goes to stdout, never here.
#pragma once
#include <string>

#include "base/error.hpp"

namespace moerun::log {

enum class Level { Warn = 0, Info = 1, Debug = 2 };

void set_rank(int rank);  // prefix "[rank N]" on every line (set once MPI is up)
void set_level(Level level);
Level level();
bool enabled(Level level);
void write(Level level, const std::string& msg);

template <typename... Args>
void warn(const Args&... args) {
  if (enabled(Level::Warn)) write(Level::Warn, str(args...));
}
template <typename... Args>
void info(const Args&... args) {
  if (enabled(Level::Info)) write(Level::Info, str(args...));
}
template <typename... Args>
void debug(const Args&... args) {
  if (enabled(Level::Debug)) write(Level::Debug, str(args...));
}

}  // namespace moerun::log

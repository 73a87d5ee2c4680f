// Logger implementation: one line per message, written with a single fwrite so lines of
// different ranks do not interleave mid-line.
#include "base/log.hpp"

#include <cstdio>
#include <cstring>

namespace moerun::log {
namespace {

struct State {
  Level level = Level::Info;
  int rank = -1;
};

State& state() {
  static State s;
  return s;
}

}  // namespace

void set_rank(int rank) {
  state().rank = rank;
}
void set_level(Level level) {
  state().level = level;
}
Level level() {
  return state().level;
}
bool enabled(Level l) {
  return static_cast<int>(l) <= static_cast<int>(state().level);
}

void write(Level l, const std::string& msg) {
  static const char* names[] = {"warn", "info", "debug"};
  std::string line = "moerun";
  if (state().rank >= 0) line += str("[", state().rank, "]");
  // Messages quote names and values read from files: escaped as error messages are (\xNN).
  line += str(" ", names[static_cast<int>(l)], ": ", printable(msg), "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace moerun::log

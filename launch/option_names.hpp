// The command-line flag of each config field, so that errors of the engine and the job (which name
// their fields: "engine.router.load_penalty must be ...") read as the flag the user typed.
#pragma once
#include <string>

namespace moerun::launch {

// "--load-penalty" for "engine.router.load_penalty"; a field without a flag keeps its own name.
std::string option_name(const std::string& field);

// Runs `f`; a ConfigError becomes a Usage error naming the flag.
template <typename F>
void with_option_names(F&& f);

}  // namespace moerun::launch

#include "base/error.hpp"

template <typename F>
void moerun::launch::with_option_names(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    fail(ErrorKind::Usage, option_name(e.field()), " ", e.detail());
  }
}

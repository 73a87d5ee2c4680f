// A backend behind the C interface of experts/backend_abi.h (a library loaded with dlopen), as an
// ExpertBackend: every call goes through the library's ops table, and its error codes and messages
// come back as moerun::Error of the same kind.
#pragma once
#include <memory>
#include <string>

#include "experts/backend.hpp"
#include "experts/backend_abi.h"

namespace moerun::experts {

// Opens a backend through `open` (the library's entry point; `library` names it in errors).
std::unique_ptr<ExpertBackend> open_c_backend(moerun_backend_open_fn open, const std::string& library, const model::ModelConfig& config,
                                              int local_rank);

}  // namespace moerun::experts

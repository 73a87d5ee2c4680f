// Dividing a job's requests among its router ranks.
#pragma once
#include <cstdint>
#include <vector>

#include "io/requests.hpp"

namespace moerun::runtime {

// Divides requests among n routers, balanced by prompt + max_new_tokens (not by count); each
// router's list stays in input order. With a prefix cache (`prefix_block` > 0), requests whose
// prompts share their first block go to one router, in pieces of at most a fair share. Deterministic.
std::vector<std::vector<int64_t>> split_requests(const std::vector<io::Request>& requests, const std::vector<int64_t>& pending, int n,
                                                 int64_t prefix_block = 0);

}  // namespace moerun::runtime

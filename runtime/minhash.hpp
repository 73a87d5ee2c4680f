// MinHash signatures of expert sets, for expert-similarity batching: a request's set is the
// (layer, expert) pairs its prompt was routed to, and the share of equal signature entries
// estimates the Jaccard similarity of two sets (standard error about 1/sqrt(2 * kMinHashSize)).
#pragma once
#include <cstdint>
#include <vector>

namespace moerun::runtime {

inline constexpr int kMinHashSize = 64;

using MinHashSignature = std::vector<uint64_t>;  // kMinHashSize entries; all ~0 for the empty set

// Signature of the set of elements given (duplicates allowed).
MinHashSignature minhash_of(const std::vector<int64_t>& elements);
// Estimated Jaccard similarity in [0, 1]; two empty sets are 0.
double estimated_jaccard(const MinHashSignature& a, const MinHashSignature& b);

// The (layer, expert) pairs of a prompt's routing ([layer][token * top_k + j], -1 for an empty slot)
// as elements layer * num_experts + expert.
std::vector<int64_t> expert_set(const std::vector<std::vector<int32_t>>& routing, int64_t num_experts);

}  // namespace moerun::runtime

// Next-token sampling: greedy (argmax, ties to the lower id) when temperature is 0, else
// temperature + top-p with a counter-based RNG keyed by (request seed, step), so a request's tokens
// do not depend on the batch it shares or on the rank that runs it.
#pragma once
#include <cstdint>

namespace moerun::runtime {

int32_t argmax(const float* logits, int64_t V);
int32_t sample_token(const float* logits, int64_t V, double temperature, double top_p, uint64_t seed, int64_t step);
// Uniform double in [0, 1) from (seed, step): splitmix64 of the pair.
double uniform01(uint64_t seed, int64_t step);

}  // namespace moerun::runtime

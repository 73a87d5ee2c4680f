// Next-token sampling: greedy (argmax, ties to the lower id) when temperature is 0, else
// temperature with top-k, min-p and top-p filters and a counter-based RNG keyed by (request seed,
// step), so a request's tokens do not depend on the batch it shares or on the rank that runs it.
// logit_bias and the presence, frequency and repetition penalties (vLLM's definitions) change the
// logits first, from the request's own tokens only.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "io/requests.hpp"

namespace moerun::runtime {

int32_t argmax(const float* logits, int64_t V);
int32_t sample_token(const float* logits, int64_t V, double temperature, double top_p, uint64_t seed, int64_t step);
// With the sampling fields `f`: the logits adjusted (into `scratch`) by f's bias and penalties, the
// presence and frequency penalties counting `output`, the repetition penalty `prompt` and `output`;
// then greedy, or sampled with f's top-k and min-p and top_p. Neutral fields: sample_token's token.
int32_t sample_token(const float* logits, int64_t V, double temperature, double top_p, const io::SamplingFields& f, uint64_t seed,
                     int64_t step, std::span<const int32_t> prompt, std::span<const int32_t> output, std::vector<float>& scratch);
// The logits `f` samples from: `logits` with f's bias and penalties applied, written to `out`.
void adjust_logits(const float* logits, int64_t V, const io::SamplingFields& f, std::span<const int32_t> prompt,
                   std::span<const int32_t> output, float* out);
// Uniform double in [0, 1) from (seed, step): splitmix64 of the pair.
double uniform01(uint64_t seed, int64_t step);

}  // namespace moerun::runtime

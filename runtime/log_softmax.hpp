// Log-probabilities from a step's logits (scoring: prompt and output log-probs, perplexity, KL
// divergence): the log-sum-exp of a row with float64 accumulation, a token's log-probability with
// its top-K alternatives, a whole row's log-softmax, and the KL divergence of two such rows.
#pragma once
#include <cstdint>
#include <vector>

#include "io/requests.hpp"

namespace moerun::runtime {

// log Σ exp(row[v]), as max + log Σ exp(row - max): stable for any finite logits. The exponentials
// are float32 (AVX-512 where the CPU has it) summed 16 at a time into float64: below 1e-6 relative.
double log_sum_exp(const float* row, int64_t V);
// log_sum_exp of each row of logits [rows, V], rows in parallel (OpenMP).
std::vector<double> log_sum_exp_rows(const float* logits, int64_t rows, int64_t V);

// row[token] - lse, and the top_k most probable tokens (ties: the lower id first).
io::TokenLogprob token_logprob(const float* row, int64_t V, double lse, int32_t token, int64_t top_k);
// out[v] = row[v] - lse, rounded to float32.
void log_softmax_row(const float* row, int64_t V, double lse, float* out);
// KL(P || Q) = Σ_v p_v (log p_v - log q_v) over log-probability rows, in float64 with std::exp:
// exactly 0 for equal rows (every term is p·0).
double kl_divergence(const float* log_p, const float* log_q, int64_t V);

}  // namespace moerun::runtime

// Non-finite values in the forward (issue 63): weights that are finite but overflow float32 in use
// (an lm_head row of 3e38, a huge fp8 scale) pass every load check and turn a token's hidden state
// or logits into Inf or NaN. The forward marks the first layer where each token's hidden state
// stopped being finite, and the scheduler ends that request with an error naming it, instead of
// sampling token 0 or writing NaN log-probs.
#pragma once
#include <cstdint>

namespace moerun::runtime {

// True when x[0, n) holds no NaN or Inf (branch-free over the exponent bits, vectorized).
bool all_finite(const float* x, int64_t n);
// For each row r of x [rows, cols] with flag[r] < 0 that holds a NaN or Inf: flag[r] = mark.
void flag_nonfinite_rows(const float* x, int64_t rows, int64_t cols, int32_t mark, int32_t* flag);

}  // namespace moerun::runtime

// exp on 16 floats with AVX-512F, for the kernels that need it in a loop (the fused SiLU of the
// small-M panels, the log-sum-exp of log-probabilities). Include only from translation units that
// check cpu_features().avx512f (base/cpu_features.hpp) before calling it.
#pragma once
#include <immintrin.h>

namespace moerun {

// exp(v) = 2^n · 2^f with n = round(v·log2 e), |f| <= 1/2, 2^f by its Taylor series to degree 7
// (relative error below 2e-8 before rounding); scalef gives 0 and inf where exp under- or overflows.
__attribute__((target("avx512f"))) inline __m512 exp_ps(__m512 v) {
  const __m512 t = _mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f));
  // (The masked forms with an all-ones mask: GCC 12 warns of an uninitialised pass-through in the
  // plain ones.)
  const __m512 n = _mm512_mask_roundscale_ps(t, 0xffff, t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 g = _mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(0.693147180559945309f));  // f·ln 2
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  for (float c : {1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(c));
  return _mm512_mask_scalef_ps(p, 0xffff, p, n);
}

}  // namespace moerun

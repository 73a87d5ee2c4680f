// Time per 512-bit instruction on this CPU, 12 independent chains of each kind (throughput, not
// latency; the least of 3 runs), plus the 256-bit add for comparison. docs/log/performance-2026.md, issue 25:
// on the 2-core AMD EPYC VM vpdpbusd, vfmadd, vpermb, vpermps and vpsrlw on zmm took 0.273-0.279
// ns, vpaddd zmm 0.138 and vpaddd ymm 0.069.
//   g++ -O2 -march=native docs/data/2026-12-03-a96b0f0-zmm_throughput.cpp -o /tmp/zmm && /tmp/zmm
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

constexpr int kChains = 12;
constexpr int kIters = 20000000;

template <class V, class Op>
double ns_once(V init, Op op) {
  // Twelve named chains, so that they live in registers: in an array GCC kept them in memory and
  // each step became a load, the op and a 64-byte store (that measured the stores: ~0.55 ns for every
  // kind, which an earlier version of this file reported).
  V s0 = init, s1 = init, s2 = init, s3 = init, s4 = init, s5 = init, s6 = init, s7 = init, s8 = init, s9 = init, s10 = init, s11 = init;
  const auto t0 = std::chrono::steady_clock::now();
  for (int k = 0; k < kIters; ++k) {
#define MOERUN_STEP(v) \
  v = op(v);           \
  asm volatile("" : "+v"(v));
    MOERUN_STEP(s0)
    MOERUN_STEP(s1) MOERUN_STEP(s2) MOERUN_STEP(s3) MOERUN_STEP(s4) MOERUN_STEP(s5) MOERUN_STEP(s6) MOERUN_STEP(s7) MOERUN_STEP(s8)
        MOERUN_STEP(s9) MOERUN_STEP(s10) MOERUN_STEP(s11)
#undef MOERUN_STEP
  }
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  V all[kChains] = {s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11};
  volatile char sink = reinterpret_cast<const char*>(all)[0];
  (void)sink;
  return t / kIters / kChains * 1e9;
}

// The least of three runs (the first ones pay for the clock ramping up).
template <class V, class Op>
double ns_per_op(V init, Op op) {
  double best = 1e30;
  for (int run = 0; run < 3; ++run) best = std::min(best, ns_once(init, op));
  return best;
}

int main() {
  const __m512i a = _mm512_set1_epi32(3), b = _mm512_set1_epi32(5);
  const __m512 fa = _mm512_set1_ps(1.0001f), fb = _mm512_set1_ps(0.9999f);
  std::printf("vpdpbusd zmm  %.3f ns\n", ns_per_op(a, [&](__m512i s) { return _mm512_dpbusd_epi32(s, a, b); }));
  std::printf("vfmadd zmm    %.3f ns\n", ns_per_op(fa, [&](__m512 s) { return _mm512_fmadd_ps(s, fa, fb); }));
  std::printf("vpermb zmm    %.3f ns\n", ns_per_op(a, [&](__m512i s) { return _mm512_permutexvar_epi8(s, b); }));
  std::printf("vpermps zmm   %.3f ns\n", ns_per_op(fa, [&](__m512 s) { return _mm512_permutexvar_ps(_mm512_castps_si512(s), fa); }));
  std::printf("vpsrlw zmm    %.3f ns\n", ns_per_op(a, [&](__m512i s) { return _mm512_srli_epi16(s, 4); }));
  std::printf("vpaddd zmm    %.3f ns\n", ns_per_op(a, [&](__m512i s) { return _mm512_add_epi32(s, a); }));
  const __m256i a2 = _mm256_set1_epi32(3);
  std::printf("vpaddd ymm    %.3f ns\n", ns_per_op(a2, [&](__m256i s) { return _mm256_add_epi32(s, a2); }));
  return 0;
}

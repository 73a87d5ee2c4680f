// Small-M matmul kernels: AVX-512 FMA on F32_16a64b, AVX512_BF16 dot products on BF16_16a64b2a.
// Each thread takes pairs of 64-column blocks of W and streams them once; x (a few rows) stays in L1.
#include "base/small_m_matmul.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/error.hpp"

namespace moerun {
namespace {

constexpr int64_t kNB = 64;  // columns per block

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Prefetch distance for the bf16 loops: one k-row of a block is 256 bytes (64 columns of bf16
// pairs), and fetching 1 KiB ahead keeps more misses in flight than the hardware prefetcher does
// alone (two blocks per pass: M = 1 27 -> 29 GB/s, M = 4 22 -> 26). The f32 loop measured slower
// with it, so it has none.
constexpr int64_t kPrefetchBytes = 1024;

inline void prefetch_k_row(const void* row) {
  const char* p = static_cast<const char*>(row) + kPrefetchBytes;
  for (int line = 0; line < 4; ++line) _mm_prefetch(p + 64 * line, _MM_HINT_T0);
}

// B adjacent 64-column blocks (`block_elems` apart in W), rows 0..R of x (R <= kSmallM): 4
// accumulators of 16 lanes per row and block. out [R][B * 64].
template <int R, int B>
__attribute__((target("avx512f"))) void f32_blocks(const float* x, int64_t K, const float* wb, int64_t block_elems,
                                                   float* out) {
  __m512 acc[R][B][4];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 4; ++j) acc[r][b][j] = _mm512_setzero_ps();
  const int64_t kb_count = ceil_div(K, 16);
  for (int64_t kb = 0; kb < kb_count; ++kb) {
    const int64_t kk = std::min<int64_t>(16, K - kb * 16);  // the padded tail is zero in W, but x ends at K
    for (int64_t a = 0; a < kk; ++a) {
      for (int b = 0; b < B; ++b) {
        const float* row = wb + b * block_elems + (kb * 16 + a) * kNB;
        const __m512 w0 = _mm512_loadu_ps(row), w1 = _mm512_loadu_ps(row + 16), w2 = _mm512_loadu_ps(row + 32),
                     w3 = _mm512_loadu_ps(row + 48);
        for (int r = 0; r < R; ++r) {
          const __m512 xv = _mm512_set1_ps(x[r * K + kb * 16 + a]);
          acc[r][b][0] = _mm512_fmadd_ps(w0, xv, acc[r][b][0]);
          acc[r][b][1] = _mm512_fmadd_ps(w1, xv, acc[r][b][1]);
          acc[r][b][2] = _mm512_fmadd_ps(w2, xv, acc[r][b][2]);
          acc[r][b][3] = _mm512_fmadd_ps(w3, xv, acc[r][b][3]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 4; ++j) _mm512_storeu_ps(out + (r * B + b) * kNB + 16 * j, acc[r][b][j]);
}

// bf16 pairs: for each k-pair, the two x values of a row as one 32-bit broadcast, dot-producted with
// 64 columns x 2 k of W (4 vectors of 32 bf16) per block.
template <int R, int B>
__attribute__((target("avx512f,avx512bf16"))) void bf16_blocks(const uint16_t* x, int64_t K, const uint16_t* wb,
                                                              int64_t block_elems, float* out) {
  __m512 acc[R][B][4];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 4; ++j) acc[r][b][j] = _mm512_setzero_ps();
  const int64_t kb_count = ceil_div(K, 32);
  for (int64_t kb = 0; kb < kb_count; ++kb) {
    const int64_t pairs = std::min<int64_t>(16, ceil_div(K - kb * 32, 2));
    for (int64_t a = 0; a < pairs; ++a) {
      const int64_t k = kb * 32 + 2 * a;
      __m512bh xv[R];
      for (int r = 0; r < R; ++r) {
        // x[k] and x[k+1] are adjacent: one 32-bit load is the pair (low half first, little-endian),
        // measured 30 -> 40 GB/s over two 16-bit loads and a shift.
        uint32_t pair = x[r * K + k];
        if (k + 1 < K) std::memcpy(&pair, x + r * K + k, 4);
        xv[r] = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
      }
      for (int b = 0; b < B; ++b) {
        const uint16_t* row = wb + b * block_elems + (kb * 16 + a) * kNB * 2;
        prefetch_k_row(row);
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(row), w1 = (__m512bh)_mm512_loadu_si512(row + 32),
                       w2 = (__m512bh)_mm512_loadu_si512(row + 64), w3 = (__m512bh)_mm512_loadu_si512(row + 96);
        for (int r = 0; r < R; ++r) {
          acc[r][b][0] = _mm512_dpbf16_ps(acc[r][b][0], w0, xv[r]);
          acc[r][b][1] = _mm512_dpbf16_ps(acc[r][b][1], w1, xv[r]);
          acc[r][b][2] = _mm512_dpbf16_ps(acc[r][b][2], w2, xv[r]);
          acc[r][b][3] = _mm512_dpbf16_ps(acc[r][b][3], w3, xv[r]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b)
      for (int j = 0; j < 4; ++j) _mm512_storeu_ps(out + (r * B + b) * kNB + 16 * j, acc[r][b][j]);
}

template <typename T>
using BlocksKernel = void (*)(const T*, int64_t, const T*, int64_t, float*);

// Kernels by rows (index M - 1): two adjacent blocks per pass, and one for an odd last block.
// Two blocks per pass are two weight streams per thread; at M = 1..4 they measured 20-25 -> 27-29
// GB/s (f32 M = 2..4, bf16 M = 1..4), the spills of 32 accumulators at M = 4 included.
template <typename T>
struct KernelSet {
  BlocksKernel<T> two[kSmallM];
  BlocksKernel<T> one[kSmallM];
};

template <typename T>
void run_blocks(const KernelSet<T>& ks, const T* x, int64_t M, int64_t K, int64_t N, const T* w, float* y,
                int64_t block_elems) {
  const int64_t nb_count = ceil_div(N, kNB);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < ceil_div(nb_count, 2); ++t) {
    alignas(64) float out[kSmallM * 2 * kNB];
    const int64_t nb0 = 2 * t, blocks = std::min<int64_t>(2, nb_count - nb0);
    (blocks == 2 ? ks.two : ks.one)[M - 1](x, K, w + nb0 * block_elems, block_elems, out);
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n0 = (nb0 + b) * kNB, cols = std::min<int64_t>(kNB, N - n0);
      for (int64_t r = 0; r < M; ++r)
        std::memcpy(y + r * N + n0, out + (r * blocks + b) * kNB, static_cast<std::size_t>(cols) * sizeof(float));
    }
  }
}

const KernelSet<float> kF32{{f32_blocks<1, 2>, f32_blocks<2, 2>, f32_blocks<3, 2>, f32_blocks<4, 2>},
                            {f32_blocks<1, 1>, f32_blocks<2, 1>, f32_blocks<3, 1>, f32_blocks<4, 1>}};
const KernelSet<uint16_t> kBF16{{bf16_blocks<1, 2>, bf16_blocks<2, 2>, bf16_blocks<3, 2>, bf16_blocks<4, 2>},
                                {bf16_blocks<1, 1>, bf16_blocks<2, 1>, bf16_blocks<3, 1>, bf16_blocks<4, 1>}};

}  // namespace

bool small_m_supported(BlockedLayout layout) {
  static const bool f32 = __builtin_cpu_supports("avx512f");
  static const bool bf16 = f32 && __builtin_cpu_supports("avx512bf16");
  return layout == BlockedLayout::F32_16a64b ? f32 : layout == BlockedLayout::BF16_16a64b2a ? bf16 : false;
}

void small_m_matmul(BlockedLayout layout, const void* x, int64_t M, int64_t K, int64_t N, const void* w, float* y) {
  if (M < 1 || M > kSmallM) fail(ErrorKind::Internal, "small_m_matmul: M = ", M, " is not in [1, ", kSmallM, "]");
  if (layout == BlockedLayout::F32_16a64b) {
    run_blocks(kF32, static_cast<const float*>(x), M, K, N, static_cast<const float*>(w), y, ceil_div(K, 16) * 16 * kNB);
  } else if (layout == BlockedLayout::BF16_16a64b2a) {
    run_blocks(kBF16, static_cast<const uint16_t*>(x), M, K, N, static_cast<const uint16_t*>(w), y,
               ceil_div(K, 32) * 32 * kNB);
  } else {
    fail(ErrorKind::Internal, "small_m_matmul: no kernel for this weight layout");
  }
}

}  // namespace moerun

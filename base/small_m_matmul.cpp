// Small-M matmul kernels: AVX-512 FMA on F32_16a64b, AVX512_BF16 dot products on BF16_16a64b2a.
// Each thread takes pairs of 64-column blocks of W and streams them once; x (a few rows) stays in L1.
#include "base/small_m_matmul.hpp"

#include <omp.h>

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "base/aligned_buffer.hpp"
#include "base/amx_bf16_panel.hpp"
#include "base/cpu_features.hpp"
#include "base/dtype.hpp"
#include "base/exp_avx512.hpp"
#include "base/error.hpp"
#include "base/parallel_for.hpp"

namespace moerun {
namespace {

constexpr int64_t kNB = 64;  // columns per block

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

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
__attribute__((target("avx512f"))) void f32_blocks(const float* x, int64_t K, const float* wb, int64_t block_elems, float* out) {
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
__attribute__((target("avx512f,avx512bf16"))) void bf16_blocks(const uint16_t* x, int64_t K, const uint16_t* wb, int64_t block_elems,
                                                               float* out) {
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

// Each thread takes an equal run of 64-column blocks, two per pass and a single one at an odd end:
// with pairs handed out alone, 6 blocks on 2 threads (an expert's w1 of 384 rows) left one thread
// idle for a third of the GEMM.
template <typename T>
void run_blocks(const KernelSet<T>& ks, const T* x, int64_t M, int64_t K, int64_t N, const T* w, float* y, int64_t block_elems) {
  const int64_t nb_count = ceil_div(N, kNB);
  // Inside a parallel region (an expert per thread: CpuBackend::run_all) on the calling thread alone.
#pragma omp parallel if (!omp_in_parallel())
  {
    const int64_t threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t first = nb_count * id / threads, last = nb_count * (id + 1) / threads;
    alignas(64) float out[kSmallM * 2 * kNB];
    for (int64_t nb0 = first; nb0 < last; nb0 += 2) {
      const int64_t blocks = std::min<int64_t>(2, last - nb0);
      // Up to kSmallM rows per pass; a second pass reads the blocks again from L2.
      for (int64_t m0 = 0; m0 < M; m0 += kSmallM) {
        const int64_t rows = std::min<int64_t>(kSmallM, M - m0);
        (blocks == 2 ? ks.two : ks.one)[rows - 1](x + m0 * K, K, w + nb0 * block_elems, block_elems, out);
        for (int64_t b = 0; b < blocks; ++b) {
          const int64_t n0 = (nb0 + b) * kNB, cols = std::min<int64_t>(kNB, N - n0);
          for (int64_t r = 0; r < rows; ++r)
            std::memcpy(y + (m0 + r) * N + n0, out + (r * blocks + b) * kNB, static_cast<std::size_t>(cols) * sizeof(float));
        }
      }
    }
  }
}

const KernelSet<float> kF32{{f32_blocks<1, 2>, f32_blocks<2, 2>, f32_blocks<3, 2>, f32_blocks<4, 2>},
                            {f32_blocks<1, 1>, f32_blocks<2, 1>, f32_blocks<3, 1>, f32_blocks<4, 1>}};
const KernelSet<uint16_t> kBF16{{bf16_blocks<1, 2>, bf16_blocks<2, 2>, bf16_blocks<3, 2>, bf16_blocks<4, 2>},
                                {bf16_blocks<1, 1>, bf16_blocks<2, 1>, bf16_blocks<3, 1>, bf16_blocks<4, 1>}};

// One panel: R <= kPanelRows rows of x against one 64-column block, into tile [R][64]. A step is
// 256 bytes of the block: one k-row (f32) or one k-pair (bf16), and each lane accumulates its steps
// in k order from zero, as f32_blocks and bf16_blocks do: a row gets the same bits from either
// kernel, whatever M. While it runs, it prefetches `pf_lines` cache lines from `pf` into L2,
// spread over the steps.
constexpr int kPanelRows = 6;  // 24 accumulators + 4 weight vectors + a broadcast: 29 of 32 registers

template <int R>
__attribute__((target("avx512f"))) void f32_panel(const void* xv, int64_t K, const void* wv, float* tile, const char* pf,
                                                  int64_t pf_lines) {
  const float* x = static_cast<const float*>(xv);
  const float* wb = static_cast<const float*>(wv);
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t lines_per_k = pf ? ceil_div(pf_lines, K) : 0;
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t l = k * lines_per_k; l < std::min(pf_lines, (k + 1) * lines_per_k); ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
    const float* row = wb + k * kNB;
    const __m512 w0 = _mm512_loadu_ps(row), w1 = _mm512_loadu_ps(row + 16), w2 = _mm512_loadu_ps(row + 32), w3 = _mm512_loadu_ps(row + 48);
    for (int r = 0; r < R; ++r) {
      const __m512 xb = _mm512_set1_ps(x[r * K + k]);
      acc[r][0] = _mm512_fmadd_ps(w0, xb, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(w1, xb, acc[r][1]);
      acc[r][2] = _mm512_fmadd_ps(w2, xb, acc[r][2]);
      acc[r][3] = _mm512_fmadd_ps(w3, xb, acc[r][3]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(tile + r * kNB + 16 * j, acc[r][j]);
}

// One step of bf16_panel: the k-pair p of every row as a 32-bit broadcast (a load, not a move from a
// general register: that measured 0.4x oneDNN), an odd K's last pair with a zero high half as in
// bf16_blocks.
template <int R>
__attribute__((target("avx512f,avx512bf16"), always_inline)) inline void bf16_panel_step(__m512 (&acc)[R][4], const uint16_t* x, int64_t K,
                                                                                         const uint16_t* row, int64_t p, bool whole) {
  const __m512bh w0 = (__m512bh)_mm512_loadu_si512(row), w1 = (__m512bh)_mm512_loadu_si512(row + 32),
                 w2 = (__m512bh)_mm512_loadu_si512(row + 64), w3 = (__m512bh)_mm512_loadu_si512(row + 96);
  for (int r = 0; r < R; ++r) {
    const uint16_t* xp = x + r * K + 2 * p;
    // _mm_loadu_si32: a row of odd K starts at an odd bf16, so the pair may not be 4-byte aligned.
    const __m512bh xb = whole ? (__m512bh)_mm512_broadcastd_epi32(_mm_loadu_si32(xp)) : (__m512bh)_mm512_set1_epi32(static_cast<int>(*xp));
    acc[r][0] = _mm512_dpbf16_ps(acc[r][0], w0, xb);
    acc[r][1] = _mm512_dpbf16_ps(acc[r][1], w1, xb);
    acc[r][2] = _mm512_dpbf16_ps(acc[r][2], w2, xb);
    acc[r][3] = _mm512_dpbf16_ps(acc[r][3], w3, xb);
  }
}

template <int R>
__attribute__((target("avx512f,avx512bf16"))) void bf16_panel(const void* xv, int64_t K, const void* wv, float* tile, const char* pf,
                                                              int64_t pf_lines) {
  const uint16_t* x = static_cast<const uint16_t*>(xv);
  const uint16_t* wb = static_cast<const uint16_t*>(wv);
  __m512 acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  const int64_t pairs = ceil_div(K, 2);
  const int64_t lines_per_pair = pf ? ceil_div(pf_lines, pairs) : 0;
  for (int64_t p = 0; p < pairs; ++p) {
    for (int64_t l = p * lines_per_pair; l < std::min(pf_lines, (p + 1) * lines_per_pair); ++l) _mm_prefetch(pf + 64 * l, _MM_HINT_T1);
    bf16_panel_step<R>(acc, x, K, wb + p * kNB * 2, p, 2 * p + 1 < K);
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(tile + r * kNB + 16 * j, acc[r][j]);
}

using PanelKernel = void (*)(const void*, int64_t, const void*, float*, const char*, int64_t);
const PanelKernel kF32Panels[kPanelRows] = {f32_panel<1>, f32_panel<2>, f32_panel<3>, f32_panel<4>, f32_panel<5>, f32_panel<6>};
const PanelKernel kBF16Panels[kPanelRows] = {bf16_panel<1>, bf16_panel<2>, bf16_panel<3>, bf16_panel<4>, bf16_panel<5>, bf16_panel<6>};

// The epilogue on one row (cols <= 64 valid columns of t, changed in place), stored to y's row.
__attribute__((target("avx512f"))) void store_row(float* t, int64_t cols, const PanelEpilogue& ep, const float* mul_row, void* y_row) {
  for (int64_t j = 0; j < cols; j += 16) {
    const __mmask16 mask = cols - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (cols - j)) - 1);
    __m512 v = _mm512_maskz_loadu_ps(mask, t + j);
    if (ep.silu) v = _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), v))));
    if (ep.mul_by) v = _mm512_mul_ps(v, _mm512_maskz_loadu_ps(mask, mul_row + j));
    _mm512_mask_storeu_ps(t + j, mask, v);
  }
  if (ep.bf16_out)
    f32_to_bf16(t, static_cast<uint16_t*>(y_row), static_cast<std::size_t>(cols));
  else if (t != y_row)
    std::memcpy(y_row, t, static_cast<std::size_t>(cols) * sizeof(float));
}

}  // namespace

bool panel_supported(BlockedLayout layout) {
  return small_m_supported(layout);
}

void panel_matmul(BlockedLayout layout, const void* x, int64_t M, int64_t K, int64_t N, const void* w, void* y, const PanelEpilogue& ep) {
  if (M < 1 || !panel_supported(layout)) fail(ErrorKind::Internal, "panel_matmul: M = ", M, " or the layout is not supported");
  const bool bf16 = layout == BlockedLayout::BF16_16a64b2a;
  // AMX takes 32 rows a pass and whole 32-k steps: x is copied with its rows zero-padded to them
  // when K is not a multiple of 32 (the layout's weights are padded so already).
  const bool amx = bf16 && amx_bf16_panel_supported();
  const int64_t rows_per_pass = amx ? kAmxPanelRows : kPanelRows, kx = amx ? ceil_div(K, 32) * 32 : K;
  AlignedBuffer padded;
  if (kx != K) {
    padded = AlignedBuffer(static_cast<std::size_t>(M * kx) * 2);
    std::memset(padded.data(), 0, padded.size());
    for (int64_t m = 0; m < M; ++m)
      std::memcpy(padded.as<uint16_t>() + m * kx, static_cast<const uint16_t*>(x) + m * K, static_cast<std::size_t>(K) * 2);
    x = padded.data();
  }
  const PanelKernel* kernels = bf16 ? kBF16Panels : kF32Panels;
  const std::size_t xs = bf16 ? 2 : 4, ys = ep.bf16_out ? 2 : 4;
  const int64_t nb_count = ceil_div(N, kNB), block_bytes = (bf16 ? ceil_div(K, 32) * 32 : ceil_div(K, 16) * 16) * kNB * xs;
  const int64_t passes = ceil_div(M, rows_per_pass), block_lines = block_bytes / 64;
  const int64_t share = ceil_div(block_lines, passes);  // lines of the next block prefetched per pass
  const char* wc = static_cast<const char*>(w);
  const char* xc = static_cast<const char*>(x);
  parallel_for(nb_count, true, [&](int64_t nb) {
    alignas(64) float tile[kAmxPanelRows * kNB];
    const char* wb = wc + nb * block_bytes;
    const char* next = nb + 1 < nb_count ? wb + block_bytes : nullptr;
    const int64_t n0 = nb * kNB, cols = std::min<int64_t>(kNB, N - n0);
    int64_t configured = 0;  // the rows the AMX tiles are configured for in this block
    for (int64_t p = 0; p < passes; ++p) {
      const int64_t m0 = p * rows_per_pass, R = std::min<int64_t>(rows_per_pass, M - m0);
      if (amx) {
        if (configured != R) amx_bf16_configure(configured = R);
        amx_bf16_panel(reinterpret_cast<const uint16_t*>(xc) + m0 * kx, R, kx, reinterpret_cast<const uint16_t*>(wb), tile);
      } else {
        const int64_t first = p * share, lines = next ? std::max<int64_t>(0, std::min(share, block_lines - first)) : 0;
        kernels[R - 1](xc + static_cast<std::size_t>(m0 * K) * xs, K, wb, tile, next ? next + 64 * first : nullptr, lines);
      }
      for (int64_t r = 0; r < R; ++r)
        store_row(tile + r * kNB, cols, ep, ep.mul_by ? ep.mul_by + (m0 + r) * N + n0 : nullptr,
                  static_cast<char*>(y) + static_cast<std::size_t>((m0 + r) * N + n0) * ys);
    }
    if (amx) amx_bf16_release();
  });
}

void apply_panel_epilogue(float* acc, int64_t M, int64_t N, const PanelEpilogue& ep, void* y) {
  const std::size_t ys = ep.bf16_out ? 2 : 4;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n0 = 0; n0 < N; n0 += kNB)
      store_row(acc + m * N + n0, std::min<int64_t>(kNB, N - n0), ep, ep.mul_by ? ep.mul_by + m * N + n0 : nullptr,
                static_cast<char*>(y) + static_cast<std::size_t>(m * N + n0) * ys);
}

bool small_m_supported(BlockedLayout layout) {
  const bool f32 = cpu_features().avx512f;
  const bool bf16 = f32 && cpu_features().avx512bf16;
  return layout == BlockedLayout::F32_16a64b ? f32 : layout == BlockedLayout::BF16_16a64b2a ? bf16 : false;
}

int64_t small_m_max_rows() {
  return cpu_features().amx_bf16 ? kSmallM : kSmallMMaxRows;
}

void small_m_matmul(BlockedLayout layout, const void* x, int64_t M, int64_t K, int64_t N, const void* w, float* y) {
  if (M < 1 || M > kSmallMMaxRows) fail(ErrorKind::Internal, "small_m_matmul: M = ", M, " is not in [1, ", kSmallMMaxRows, "]");
  if (layout == BlockedLayout::F32_16a64b) {
    run_blocks(kF32, static_cast<const float*>(x), M, K, N, static_cast<const float*>(w), y, ceil_div(K, 16) * 16 * kNB);
  } else if (layout == BlockedLayout::BF16_16a64b2a) {
    run_blocks(kBF16, static_cast<const uint16_t*>(x), M, K, N, static_cast<const uint16_t*>(w), y, ceil_div(K, 32) * 32 * kNB);
  } else {
    fail(ErrorKind::Internal, "small_m_matmul: no kernel for this weight layout");
  }
}

}  // namespace moerun

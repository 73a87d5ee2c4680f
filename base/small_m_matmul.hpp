// Matmul for a few rows (decode: one to a few tokens per weight; prefill: tens) on the blocked weight layouts
// oneDNN packs into, streaming the weights once at memory bandwidth. oneDNN's brgemm reaches about
// 20 GB/s at M = 1 on the 2-core VMs measured, these loops about 28 GB/s (issue 11). Kernel-facing
// functions over raw spans; Matmul picks them when the layout is one of the two below, the machine
// has the ISA, and M is small. Results agree with oneDNN's to rounding (another summation order).
#pragma once
#include <cstdint>

namespace moerun {

// The weight layouts these kernels read, as oneDNN describes them on logical weights [K, N]:
//   F32_16a64b:     [ceil(N/64)][ceil(K/16)][16 k][64 n] float32
//   BF16_16a64b2a:  [ceil(N/64)][ceil(K/32)][16 k-pairs][64 n][2 k] bfloat16 (VNNI pairs)
// Padding (beyond K or N) is zero, as oneDNN's reorder leaves it.
enum class BlockedLayout { None, F32_16a64b, BF16_16a64b2a };

// Rows one pass of the streaming kernels computes (small_m_matmul); more rows take several passes
// over each pair of weight blocks while it sits in L2.
constexpr int64_t kSmallM = 4;
constexpr int64_t kSmallMMaxRows = 8;
// Rows up to which Matmul uses them: kSmallMMaxRows (two passes) on matrices of at most
// kTwoPassMaxElements (an expert's; `moerun bench gemm --m 8`, bf16 on the AMD host: 384 x 1024
// 1.07-1.17x oneDNN, 2048 x 1024 0.94x, 32000 x 1024 0.91x), else kSmallM; kSmallM on CPUs with
// AMX-BF16, chosen when oneDNN's AMX kernels took bf16 from 5 rows (docs/log/performance-2026.md, "Tried and
// dropped"). bf16 now runs the AMX panel at every M there, so this only moves float32's rows 5-8.
constexpr int64_t kTwoPassMaxElements = int64_t{1} << 20;
int64_t small_m_max_rows();
// Whether this CPU runs the kernel for `layout` (AVX-512F; AVX512_BF16 for bf16).
bool small_m_supported(BlockedLayout layout);

// y[m, n] = sum_k x[m, k] * W[k, n] for m < M <= kSmallMMaxRows, n < N: x float32 [M, K] (F32) or bf16 bits
// [M, K] (BF16), y float32 [M, N] (row stride N). Threads: the OpenMP team, over 64-column blocks.
void small_m_matmul(BlockedLayout layout, const void* x, int64_t M, int64_t K, int64_t N, const void* w, float* y);

// What panel_matmul applies to each result before storing it.
struct PanelEpilogue {
  bool silu = false;  // y = silu(x·W)
  const float* mul_by = nullptr;  // y = (x·W) ⊙ mul_by, float32 [M, N]
  bool bf16_out = false;  // y is bf16 bits [M, N] instead of float32
};

// Whether this CPU runs panel_matmul on `layout` (as small_m_supported).
bool panel_supported(BlockedLayout layout);

// y = epilogue(x·W) for any M >= 1 on either layout: x float32 [M, K] (F32) or bf16 bits (BF16), y
// [M, N]. It computes 6-row panels (bf16 with AMX: 32-row panels of AMX tiles,
// base/amx_bf16_panel.hpp) of each 64-column block while the block sits in L2, and prefetches the
// thread's next block during them (not the AMX panels: they prefetch inside the block); it needs no JIT per M, where oneDNN creates a
// primitive for every new row count (0.35-1.0 ms each in `moerun bench gemm`). Each output lane sums
// its k in order from zero, exactly as small_m_matmul does: a row's bits do not depend on M or on
// the other rows (batch invariance, issue 44).
void panel_matmul(BlockedLayout layout, const void* x, int64_t M, int64_t K, int64_t N, const void* w, void* y, const PanelEpilogue& ep);

// The same epilogue on small_m_matmul's float32 result acc [M, N] (changed in place), stored to y
// (which may be acc when the output is float32).
void apply_panel_epilogue(float* acc, int64_t M, int64_t N, const PanelEpilogue& ep, void* y);

}  // namespace moerun

// AMX-BF16 panels for panel_matmul on CPUs with AMX: up to 32 rows of x against one 64-column block
// of bf16 weights in the BA16a64b2a layout, by tdpbf16ps. A row of a C tile depends on its A row
// and the weights only, not on the tile's row count (checked on the AMX host), so a row's bits do
// not depend on M or the other rows: batch invariance (issue 44) with AMX's speed. Its sums differ
// from vdpbf16ps's in the last bit (another rounding inside a step), so where it runs it takes
// every bf16 GEMM, decode's one row included.
#pragma once
#include <cstdint>

namespace moerun {

constexpr int64_t kAmxPanelRows = 32;

// Whether this CPU runs amx_bf16_panel (AMX-BF16, AVX512_BF16, and Linux granted the tile state).
bool amx_bf16_panel_supported();

// Loads the tile configuration of amx_bf16_panel for R rows (1 <= R <= 32) on this thread; it stays
// until amx_bf16_release or another configuration (the AMX-INT8 kernel's, oneDNN's), so a caller
// configures around its own calls only: once per weight block measured 5-7% faster than per panel
// on 1024 x 384 at 64-128 rows (`bench gemm`).
void amx_bf16_configure(int64_t R);
void amx_bf16_release();

// tile[r * 64 + c] = sum_k x[r * K + k] * W[k, c] for r < R <= 32 and the 64 columns of block `wb`:
// x bf16 bits with row stride K, K a multiple of 32 (zero padding beyond the real K, as the layout's).
// Needs amx_bf16_configure(R) on this thread.
void amx_bf16_panel(const uint16_t* x, int64_t R, int64_t K, const uint16_t* wb, float* tile);

}  // namespace moerun

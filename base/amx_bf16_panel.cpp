// AMX-BF16 panel: float32 C tiles accumulate in k order, 32 k (16 pairs) per step, from A tiles of
// the rows and B tiles of the weights read in place: up to 16 rows against the block's four
// 16-column quarters at once, more rows against its two 32-column halves in turn.
#include "base/amx_bf16_panel.hpp"

#include <immintrin.h>

#include <array>

#include "base/amx_tile_config.hpp"
#include "base/cpu_features.hpp"

namespace moerun {
namespace {

constexpr int64_t kNB = 64;  // columns per weight block
constexpr int64_t kRowStride = 256;  // bytes from one k-pair row of a block to the next (64 columns x 2 bf16)
// The next k-step's 4 KiB of the block fetched during this one: M = 1 29.6 -> 32.1 GB/s on a
// 32000 x 1024 matrix (`bench gemm`, the AMX host), 2 and 4 steps ahead no better.
constexpr int64_t kPrefetchSteps = 1;

// Up to 16 rows (quarter_blocks): tmm0-3 C, float32, R rows x the block's four 16-column quarters;
// tmm4 A, R rows x 16 k-pairs; tmm6-7 B, 16 k-pairs x 16 columns x 2. More rows (half_block): tmm0-1
// C of the first 16 rows, tmm2-3 of the other r1 = R - 16, tmm4-5 their A, on a 32-column half.
constexpr TileConfig bf16_config(int R) {
  TileConfig c;
  const int r1 = R > 16 ? R - 16 : 0;
  const int rows[8] = {R > 16 ? 16 : R, R > 16 ? 16 : R, R > 16 ? r1 : R, R > 16 ? r1 : R, R > 16 ? 16 : R, r1, 16, 16};
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = rows[t] > 0 ? 64 : 0;
    c.rows[t] = static_cast<uint8_t>(rows[t]);
  }
  return c;
}

constexpr std::array<TileConfig, kAmxPanelRows> bf16_configs() {
  std::array<TileConfig, kAmxPanelRows> a{};
  for (int r = 0; r < kAmxPanelRows; ++r) a[static_cast<std::size_t>(r)] = bf16_config(r + 1);
  return a;
}
const std::array<TileConfig, kAmxPanelRows> kConfigs = bf16_configs();

__attribute__((target("amx-tile"))) inline void zero_c_tiles() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// Up to 16 rows against the whole block: each k-step consumes the 4 cache lines of each of its k-pair
// rows together, so decode's one row streams the block in order (M = 1 at ~32 GB/s, the streaming
// kernels' 33-35; the two halves in turn, as for more rows, measured 20% slower).
__attribute__((target("amx-tile,amx-bf16"))) inline void quarter_blocks(const uint16_t* x, int64_t K, const uint16_t* b, float* tile) {
  zero_c_tiles();
  for (int64_t k = 0; k < K; k += 32) {
    const uint16_t* bk = b + k * kNB;  // the block's 16 k-pair rows of this step
    if (k + kPrefetchSteps * 32 < K) {
      const char* ahead = reinterpret_cast<const char*>(bk + kPrefetchSteps * 32 * kNB);
      for (int l = 0; l < 64; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
    }
    _tile_loadd(4, x + k, K * 2);
    _tile_loadd(6, bk, kRowStride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, bk + 32, kRowStride);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(6, bk + 64, kRowStride);
    _tile_dpbf16ps(2, 4, 6);
    _tile_loadd(7, bk + 96, kRowStride);
    _tile_dpbf16ps(3, 4, 7);
  }
  _tile_stored(0, tile, kNB * 4);
  _tile_stored(1, tile + 16, kNB * 4);
  _tile_stored(2, tile + 32, kNB * 4);
  _tile_stored(3, tile + 48, kNB * 4);
}

// 17-32 rows against one 32-column half of the block (from `b`): each k-step loads two A and two B
// tiles for four tdpbf16ps, one B load per two products (the block sits in L2 by then).
__attribute__((target("amx-tile,amx-bf16"))) inline void half_block(const uint16_t* x, int64_t K, const uint16_t* b, float* tile) {
  zero_c_tiles();
  for (int64_t k = 0; k < K; k += 32) {
    const uint16_t* bk = b + k * kNB;
    _tile_loadd(4, x + k, K * 2);
    _tile_loadd(6, bk, kRowStride);
    _tile_loadd(7, bk + 32, kRowStride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, x + 16 * K + k, K * 2);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, tile, kNB * 4);
  _tile_stored(1, tile + 16, kNB * 4);
  _tile_stored(2, tile + 16 * kNB, kNB * 4);
  _tile_stored(3, tile + 16 * kNB + 16, kNB * 4);
}

}  // namespace

bool amx_bf16_panel_supported() {
  return cpu_features().amx_bf16_tiles;
}

__attribute__((target("amx-tile"))) void amx_bf16_configure(int64_t R) {
  _tile_loadconfig(&kConfigs[static_cast<std::size_t>(R - 1)]);
}

__attribute__((target("amx-tile"))) void amx_bf16_release() {
  _tile_release();
}

__attribute__((target("amx-tile,amx-bf16"))) void amx_bf16_panel(const uint16_t* x, int64_t R, int64_t K, const uint16_t* wb, float* tile) {
  if (R <= 16) {
    quarter_blocks(x, K, wb, tile);
  } else {
    half_block(x, K, wb, tile);
    half_block(x, K, wb + 64, tile + 32);  // columns 32-63: 32 columns x 2 bf16 on
  }
}

}  // namespace moerun

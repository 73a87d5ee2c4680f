// Quantized matmul: activation quantization, the blocked weight form, and the VNNI, AMX-INT8 and
// portable kernels over it (same integer sums and the same float operations in the same order).
#include "base/quant_matmul.hpp"

#include <omp.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/amx_tile_config.hpp"
#include "base/cpu_features.hpp"
#include "base/dpbusd_avx512.hpp"
#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/parallel_for.hpp"
#include "base/weight_scheme_table.hpp"

namespace moerun {
namespace {

constexpr int64_t kG = kQuantGroup;
constexpr int64_t kNB = 16;  // output rows per block: one 32-bit lane each
// Rows per pass over a weight block. A prefill step's expert sees ~8 rows (128 experts, top-8, 128
// tokens): q4 takes them in one pass (its 8 rows' sums are 24 of the 32 vector registers; `bench
// gemm` 384 x 1024, M = 8: 1.10x two passes of 4), q8 in two (8 at once measured 0.79x: spills).
constexpr int kMaxRowsPerPass = 8;
int rows_per_pass(WeightScheme s) {
  return s == WeightScheme::Q8 ? 4 : 8;
}
// Groups ahead a block's stream is prefetched, into L2: 4 groups into L1 left the 8-row passes
// waiting on memory (an LM head of 32000 x 1024, 8 rows: 1.12-1.48 -> 1.08-1.09 ms, `bench gemm`)
// and one-row experts 10-15% slower; 12-24 groups, into L1 or L2, all measured alike.
constexpr int64_t kPrefetchChunks = 16;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
// q4 and int4 share their nibbles' blocked layout (and so the AMX tile unpacking); they differ in
// what follows the values: q4's fp16 d and m, int4's 16-bit scales and level bytes.
constexpr bool nibbles(WeightScheme s) {
  return s != WeightScheme::Q8;
}
// Bytes of one (block, group) chunk: the interleaved values, then the scales.
constexpr int64_t value_bytes(WeightScheme s) {
  return nibbles(s) ? 256 : 512;
}
constexpr int64_t chunk_bytes(WeightScheme s) {
  return value_bytes(s) + (s == WeightScheme::Q8 ? 32 : s == WeightScheme::Q4 ? 64 : 48);
}

// A chunk's 16 scales dw and second terms mw: q8's fp16 d (its minimum is in qinit); q4's fp16 d
// and m (weight = d * level + m, m meeting Σx); int4's bf16 or fp16 s per lane (the level byte's
// bit 7) and, as mw, its zero level z as a float: the sum becomes Σ u qx - z Σ qx (int4_sum).
// Why int4 takes the zero level against the int8-rounded activations: q4's m * Σx takes the exact
// activations while the levels meet the rounded ones, so each group's rounding error comes back
// multiplied by the level's offset (8 for a symmetric int4): q4's form left a Kimi-shaped test
// model's logits about 2% from the float64 reference (docs/NOTES.md, issue 64). Σ (u - z) qx is llama.cpp's Q4_0 x Q8_0
// arithmetic, and matches that reference, inputs rounded as the kernels round them, to float32
// rounding (int4_reference.py).
template <WeightScheme S>
__attribute__((target("avx512f"))) inline void load_scales(const uint8_t* sc, __m512& dw, __m512& mw) {
  if constexpr (S == WeightScheme::Int4) {
    const __m256i s16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc));
    const __m128i lv8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 32));
    const __m512i lv = _mm512_cvtepu8_epi32(lv8);
    // A checkpoint's tensor has one scale type, so a chunk is all bf16 (the usual case, taken
    // without the flag's masking: its level bytes are the zero levels) or all fp16; a mixed chunk
    // takes the blend. The branch costs a movemask and keeps the decode at the read bandwidth.
    const int f16 = _mm_movemask_epi8(lv8);
    if (f16 == 0) {
      dw = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(s16), 16));
      mw = _mm512_cvtepi32_ps(lv);
      return;
    }
    const __m512 h = _mm512_cvtph_ps(s16);
    dw = f16 == 0xffff
             ? h
             : _mm512_mask_blend_ps(static_cast<__mmask16>(f16), _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(s16), 16)), h);
    mw = _mm512_cvtepi32_ps(_mm512_and_si512(lv, _mm512_set1_epi32(kInt4ZeroMask)));
  } else {
    dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
    mw = S == WeightScheme::Q4 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32))) : dw;
  }
}
// Lane n's dw and mw, as load_scales computes them.
template <WeightScheme S>
void lane_scales(const uint8_t* sc, int n, float& dw, float& mw) {
  uint16_t bits[2];
  std::memcpy(bits, sc + 2 * n, 2);
  if constexpr (S == WeightScheme::Int4) {
    const uint8_t level = sc[32 + n];
    dw = (level & kInt4F16Scale) ? f16_to_f32(bits[0]) : bf16_to_f32(bits[0]);
    mw = static_cast<float>(level & kInt4ZeroMask);
  } else {
    dw = f16_to_f32(bits[0]);
    if (S == WeightScheme::Q4) std::memcpy(bits + 1, sc + 32 + 2 * n, 2);
    mw = S == WeightScheme::Q4 ? f16_to_f32(bits[1]) : dw;
  }
}
// int4's integer sum Σ u qx - z Σ qx as a float, from Σ u qx and the row's Σ qx (QuantizedRows'
// qsum): each term an integer below 2^24, so the one fused step is exact, and equals the integer
// difference converted.
__attribute__((target("avx512f"))) inline __m512 int4_sum(__m512i ia, __m512 z, float qsum) {
  return _mm512_fnmadd_ps(z, _mm512_set1_ps(qsum), _mm512_cvtepi32_ps(ia));
}

// The kernels' view of one pass: R rows starting at `row` of x.
struct RowPass {
  const int8_t* q;
  const float* dx;
  const int32_t* qinit;
  const float* xsum;
  const float* qsum;
  int64_t K, G;
};

RowPass row_pass(const QuantizedRows& x, int64_t row) {
  const int64_t G = x.cols / kG;
  return {x.q.as<int8_t>() + row * x.cols,
          x.dx.as<float>() + row * G,
          x.qinit.as<int32_t>() + row * G,
          x.xsum.as<float>() + row * G,
          x.qsum.as<float>() + row * G,
          x.cols,
          G};
}

const int8_t* x_quad(const RowPass& p, int r, int64_t g, int j) {
  return p.q + r * p.K + g * kG + 4 * j;
}

// y[r][n] for the block at `w` (16 output rows), R rows of the pass; out [R][16]. One block at a
// time: a single weight stream per thread keeps more of the read bandwidth than 2-4 side by side.
template <WeightScheme S, int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void vnni_block(const RowPass& p, const uint8_t* w, float* out) {
  constexpr bool Q4 = nibbles(S);
  constexpr int64_t vb = value_bytes(S), cb = chunk_bytes(S);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < p.G; ++g) {
    // Two integer sums per output (halves the vpdpbusd dependency chain); q8's first starts at its
    // offset correction (-128 Σ qx), so no subtraction is left for later.
    __m512i ia[2][R];
    for (int r = 0; r < R; ++r) {
      ia[0][r] = Q4 ? _mm512_setzero_si512() : _mm512_set1_epi32(p.qinit[r * p.G + g]);
      ia[1][r] = _mm512_setzero_si512();
    }
    for (int line = 0; line < cb; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(w + (g + kPrefetchChunks) * cb + line), _MM_HINT_T1);
    for (int j = 0; j < (Q4 ? 4 : 8); ++j) {
      const __m512i v = _mm512_loadu_si512(w + g * cb + 64 * j);
      const __m512i lo = Q4 ? _mm512_and_si512(v, low4) : v;
      for (int r = 0; r < R; ++r) ia[Q4 ? 0 : j % 2][r] = dpbusd_bcast(ia[Q4 ? 0 : j % 2][r], lo, x_quad(p, r, g, j));
      if constexpr (Q4) {
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        for (int r = 0; r < R; ++r) ia[1][r] = dpbusd_bcast(ia[1][r], hi, x_quad(p, r, g, j + 4));
      }
    }
    __m512 dw, mw;
    load_scales<S>(w + g * cb + vb, dw, mw);
    for (int r = 0; r < R; ++r) {
      const __m512i sum = _mm512_add_epi32(ia[0][r], ia[1][r]);
      const __m512 f = S == WeightScheme::Int4 ? int4_sum(sum, mw, p.qsum[r * p.G + g]) : _mm512_cvtepi32_ps(sum);
      acc[r] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, _mm512_set1_ps(p.dx[r * p.G + g])), acc[r]);
      if constexpr (S == WeightScheme::Q4) acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(p.xsum[r * p.G + g]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * kNB, acc[r]);
}

// The same sums lane by lane: integer dot products, then the float steps in the kernel's order.
template <WeightScheme S>
void portable_block(const RowPass& p, int R, const uint8_t* w, float* out) {
  constexpr bool Q4 = nibbles(S);
  constexpr int64_t vb = value_bytes(S), cb = chunk_bytes(S);
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < kNB; ++n) {
      float acc = 0.0f;
      for (int64_t g = 0; g < p.G; ++g) {
        const uint8_t* chunk = w + g * cb;
        const int8_t* xq = p.q + r * p.K + g * kG;
        int32_t ia = Q4 ? 0 : p.qinit[r * p.G + g];
        for (int j = 0; j < (Q4 ? 4 : 8); ++j)
          for (int t = 0; t < 4; ++t) {
            const uint8_t v = chunk[64 * j + 4 * n + t];
            ia += (Q4 ? (v & 15) : v) * xq[4 * j + t];
            if (Q4) ia += (v >> 4) * xq[16 + 4 * j + t];
          }
        float dw, mw;
        lane_scales<S>(chunk + vb, n, dw, mw);
        const float f = S == WeightScheme::Int4 ? std::fma(-mw, p.qsum[r * p.G + g], static_cast<float>(ia)) : static_cast<float>(ia);
        acc = std::fma(f, dw * p.dx[r * p.G + g], acc);
        if (S == WeightScheme::Q4) acc = std::fma(mw, p.xsum[r * p.G + g], acc);
      }
      out[r * kNB + n] = acc;
    }
}

template <WeightScheme S>
void run_block(const RowPass& p, int R, const uint8_t* w, float* out, bool vnni) {
  if (!vnni) return portable_block<S>(p, R, w, out);
  switch (R) {
    case 1: return vnni_block<S, 1>(p, w, out);
    case 2: return vnni_block<S, 2>(p, w, out);
    case 3: return vnni_block<S, 3>(p, w, out);
    case 4: return vnni_block<S, 4>(p, w, out);
    case 5: return vnni_block<S, 5>(p, w, out);
    case 6: return vnni_block<S, 6>(p, w, out);
    case 7: return vnni_block<S, 7>(p, w, out);
    default: return vnni_block<S, 8>(p, w, out);
  }
}

// ---- AMX-INT8: C tiles of Σ qx qw per group (tdpbsud: signed activations, unsigned weights),
// then the same float step as the VNNI kernel, row by row, into float accumulators. ----

// tmm0-3: C, int32 16 x 16 (2 row blocks x 2 column blocks); tmm4-5: A, 16 rows x 32 int8 (one
// group); tmm6-7: B, 8 k-quads x 64 bytes (one group of 16 columns: a q8 chunk's values as stored).
// A static object (base/amx_tile_config.hpp says why).
constexpr TileConfig tile_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = t == 4 || t == 5 ? 32 : 64;
    cfg.rows[t] = t >= 6 ? 8 : 16;
  }
  return cfg;
}
const TileConfig kTileConfig = tile_config();
constexpr int64_t kBTileBytes = 512;

__attribute__((target("amx-tile"))) void amx_configure() {
  _tile_loadconfig(&kTileConfig);
}
__attribute__((target("amx-tile"))) void amx_release() {
  _tile_release();
}

// q4's B tiles: a chunk's nibbles as levels 0-15, k-quad j in row j.
__attribute__((target("avx512f,avx512bw"))) void unpack_q4_tile(const uint8_t* chunk, uint8_t* tile) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int j = 0; j < 4; ++j) {
    const __m512i v = _mm512_loadu_si512(chunk + 64 * j);
    _mm512_store_si512(tile + 64 * j, _mm512_and_si512(v, low4));
    _mm512_store_si512(tile + 64 * (j + 4), _mm512_and_si512(_mm512_srli_epi16(v, 4), low4));
  }
}

// The activations' per-group numbers of 16 rows, group-major ([G][16]), so that a group's 16
// broadcasts are fixed offsets from one pointer.
struct RowBlockScales {
  const float* dx;
  const int32_t* qinit;
  const float* xsum;
  const float* qsum;
};

// Group g's C tile scaled into the accumulators.
template <WeightScheme S>
__attribute__((target("avx512f"))) inline void scale_group(const RowBlockScales& rs, int64_t g, const int32_t* c, const uint8_t* sc,
                                                           __m512* acc) {
  constexpr bool Q4 = nibbles(S);
  __m512 dw, mw;
  load_scales<S>(sc, dw, mw);
  const float* dx = rs.dx + 16 * g;
  const int32_t* qinit = rs.qinit + 16 * g;
  const float* xsum = rs.xsum + 16 * g;
  const float* qsum = rs.qsum + 16 * g;
  for (int r = 0; r < 16; ++r) {
    __m512i ci = _mm512_load_si512(c + 16 * r);
    if constexpr (!Q4) ci = _mm512_add_epi32(ci, _mm512_set1_epi32(qinit[r]));
    const __m512 f = S == WeightScheme::Int4 ? int4_sum(ci, mw, qsum[r]) : _mm512_cvtepi32_ps(ci);
    acc[r] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, _mm512_set1_ps(dx[r])), acc[r]);
    if constexpr (S == WeightScheme::Q4) acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xsum[r]), acc[r]);
  }
}

// Starts a group's tdpbsud in tile set 0 (C0 A4 B6) or 1 (C1 A5 B7). GCC's tile intrinsics are
// macros that paste the tile number into the instruction: constants only, hence two functions.
__attribute__((target("amx-tile,amx-int8"))) inline void start_group0(const int8_t* a, int64_t K, const uint8_t* b) {
  _tile_zero(0);
  _tile_loadd(4, a, K);
  _tile_loadd(6, b, 64);
  _tile_dpbsud(0, 4, 6);
}
__attribute__((target("amx-tile,amx-int8"))) inline void start_group1(const int8_t* a, int64_t K, const uint8_t* b) {
  _tile_zero(1);
  _tile_loadd(5, a, K);
  _tile_loadd(7, b, 64);
  _tile_dpbsud(1, 5, 7);
}

// One column block of 16 rows: per group a C tile of Σ qx qw, stored and then scaled row by row into
// 16 float accumulators in registers, by exactly vnni_block's float steps: acc = fma(float(c + qinit),
// dw * dx, acc), then for q4 acc = fma(mw, xsum, acc). Software-pipelined over two tile sets (even
// groups in C0 A4 B6, odd in C1 A5 B7): group g + 1's tdpbsud runs while g's C is stored, and the
// scaling reads the C stored one group earlier; done in order, the tdpbsud -> tilestored -> load
// latency took most of the time.
template <WeightScheme S>
__attribute__((target("amx-tile,amx-int8,avx512f"))) void amx_block(const RowBlockScales& rs, int64_t K, const int8_t* a, const uint8_t* wb,
                                                                    const uint8_t* b_tiles, int32_t* c, float* out) {
  constexpr bool Q4 = nibbles(S);
  constexpr int64_t cb = chunk_bytes(S), vb = value_bytes(S);
  const int64_t G = K / kG;
  auto b_tile = [&](int64_t g) { return Q4 ? b_tiles + g * kBTileBytes : wb + g * cb; };
  __m512 acc[16];
  for (int r = 0; r < 16; ++r) acc[r] = _mm512_setzero_ps();
  start_group0(a, K, b_tile(0));
  for (int64_t g = 0; g < G; g += 2) {
    if (g + 1 < G) start_group1(a + (g + 1) * kG, K, b_tile(g + 1));
    _tile_stored(0, c, 64);
    if (g > 0) scale_group<S>(rs, g - 1, c + 256, wb + (g - 1) * cb + vb, acc);
    if (g + 1 >= G) {
      scale_group<S>(rs, g, c, wb + g * cb + vb, acc);
      break;
    }
    if (g + 2 < G) start_group0(a + (g + 2) * kG, K, b_tile(g + 2));
    _tile_stored(1, c + 256, 64);
    scale_group<S>(rs, g, c, wb + g * cb + vb, acc);
    if (g + 2 >= G) scale_group<S>(rs, g + 1, c + 256, wb + (g + 1) * cb + vb, acc);
  }
  for (int r = 0; r < 16; ++r) _mm512_store_ps(out + 16 * r, acc[r]);
}

// The output columns of blocks nb and nb + 1 (`two`) for every row, 16 rows at a time.
// `b_tiles`: q4's unpacked tiles of both blocks ([2][G]); q8's are read straight from w.
constexpr int kRowFields = 4;  // dx, qinit, xsum, qsum

template <WeightScheme S>
void amx_pair(const QuantizedRows& x, const AlignedBuffer& scales_t, const uint8_t* wb, int64_t block_bytes, const uint8_t* b_tiles,
              bool two, int32_t* c, float* out, float* y, int64_t N, int64_t n0) {
  const int64_t K = x.cols, G = K / kG, M = x.rows;
  for (int64_t m0 = 0; m0 < M; m0 += 16) {
    const float* t = scales_t.as<float>() + (m0 / 16) * kRowFields * G * 16;
    const RowBlockScales rs{t, reinterpret_cast<const int32_t*>(t + G * 16), t + 2 * G * 16, t + 3 * G * 16};
    for (int b = 0; b < (two ? 2 : 1); ++b) {
      amx_block<S>(rs, K, x.q.as<int8_t>() + m0 * K, wb + b * block_bytes, nibbles(S) ? b_tiles + b * G * kBTileBytes : nullptr, c, out);
      const int64_t width = std::min<int64_t>(16, N - n0 - 16 * b);
      for (int64_t r = m0; r < std::min(m0 + 16, M); ++r)
        std::memcpy(y + r * N + n0 + 16 * b, out + (r - m0) * 16, static_cast<std::size_t>(width) * 4);
    }
  }
}

// x's dx, qinit, xsum and qsum per block of 16 rows, group-major: [M/16][4][G][16] (4-byte values).
void transpose_row_scales(const QuantizedRows& x, AlignedBuffer& out) {
  const int64_t G = x.cols / kG, blocks = ceil_div(x.rows, 16);
  out.resize(static_cast<std::size_t>(blocks * kRowFields * G * 16) * 4);
  const uint32_t* src[kRowFields] = {x.dx.as<uint32_t>(), x.qinit.as<uint32_t>(), x.xsum.as<uint32_t>(), x.qsum.as<uint32_t>()};
  uint32_t* dst = out.as<uint32_t>();
  for (int64_t rb = 0; rb < blocks; ++rb)
    for (int f = 0; f < kRowFields; ++f)
      for (int64_t g = 0; g < G; ++g)
        for (int64_t r = 0; r < 16; ++r) *dst++ = src[f][(rb * 16 + r) * G + g];  // padded rows: zero
}

// A group-quantized scheme's kernels, one row per scheme of the weight-format table whose rows
// name the Group kernels (group_kernels, defined after the last of them).
struct GroupKernels {
  WeightScheme scheme;
  void (*block)(const RowPass& p, int R, const uint8_t* w, float* out, bool vnni);
  void (*amx)(const QuantizedRows& x, const AlignedBuffer& scales_t, const uint8_t* wb, int64_t block_bytes, const uint8_t* b_tiles,
              bool two, int32_t* c, float* out, float* y, int64_t N, int64_t n0);
  int64_t (*find_bad)(int64_t N, int64_t K, const uint8_t* w);
};
const GroupKernels& group_kernels(WeightScheme s);

void amx_matmul(WeightScheme s, const QuantizedRows& x, int64_t N, const uint8_t* w, float* y) {
  const GroupKernels& k = group_kernels(s);
  const int64_t G = x.cols / kG, nblocks = ceil_div(N, kNB), pairs = ceil_div(nblocks, 2);
  const int64_t block_bytes = G * chunk_bytes(s);
  thread_local AlignedBuffer scales_t;
  transpose_row_scales(x, scales_t);
  const AlignedBuffer& st = scales_t;
#pragma omp parallel if (!omp_in_parallel())
  {
    thread_local AlignedBuffer b_tiles, out, c;
    if (nibbles(s)) b_tiles.resize(static_cast<std::size_t>(2 * G * kBTileBytes));
    out.resize(256 * sizeof(float));
    c.resize(2 * 256 * sizeof(int32_t));
    // The tile state is the thread's: configured here, released before anything else (oneDNN) runs.
    amx_configure();
#pragma omp for schedule(static)
    for (int64_t pi = 0; pi < pairs; ++pi) {
      const int64_t nb = 2 * pi;
      const bool two = nb + 1 < nblocks;
      const uint8_t* wb = w + nb * block_bytes;
      if (nibbles(s))
        for (int b = 0; b < (two ? 2 : 1); ++b)
          for (int64_t g = 0; g < G; ++g)
            unpack_q4_tile(wb + b * block_bytes + g * chunk_bytes(s), b_tiles.as<uint8_t>() + (b * G + g) * kBTileBytes);
      int32_t* ci = c.as<int32_t>();
      float* o = out.as<float>();
      uint8_t* bt = b_tiles.as<uint8_t>();
      k.amx(x, st, wb, block_bytes, nibbles(s) ? bt : nullptr, two, ci, o, y, N, nb * kNB);
    }
    amx_release();
  }
}

// ---- Activation quantization: one group of 32, the same numbers in the loop and in AVX-512. ----
struct GroupQuant {
  float dx, xsum;
  int32_t qsum;
};

// Σ of 32 floats in a fixed tree (halves, then halves of those...), so the vector code below can
// add in the same order and give the same bits.
float tree_sum32(const float* v) {
  float t[16];
  for (int l = 0; l < 16; ++l) t[l] = v[l] + v[l + 16];
  for (int w = 8; w >= 1; w /= 2)
    for (int l = 0; l < w; ++l) t[l] = t[l] + t[l + w];
  return t[0];
}

void quantize_group(const float* x, int8_t* q, GroupQuant& out) {
  float amax = 0.0f;
  for (int64_t k = 0; k < kG; ++k) amax = std::max(amax, std::fabs(x[k]));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  int32_t qs = 0;
  for (int64_t k = 0; k < kG; ++k) {
    q[k] = static_cast<int8_t>(std::nearbyint(x[k] * id));
    qs += q[k];
  }
  out = {amax / 127.0f, tree_sum32(x), qs};
}

__attribute__((target("avx512f,avx512bw"))) void quantize_group_avx512(const float* x, int8_t* q, GroupQuant& out) {
  const __m512 a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b)));  // max: exact in any order
  alignas(64) float t[16];
  _mm512_store_ps(t, _mm512_add_ps(a, b));
  __m256 h = _mm256_add_ps(_mm256_load_ps(t), _mm256_load_ps(t + 8));
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  // cvtps rounds to nearest even (the default MXCSR), as nearbyint does.
  const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(id))),
                qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(id)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(qa));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(qb));
  out = {amax / 127.0f, _mm_cvtss_f32(v), _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb))};
}

}  // namespace

bool quant_kernel_supported(QuantKernel k) {
  const CpuFeatures& f = cpu_features();
  const bool vnni = f.avx512f && f.avx512bw && f.avx512vnni, amx = f.amx_int8;
  switch (k) {
    case QuantKernel::Vnni: return vnni;
    case QuantKernel::Amx: return amx;
    default: return true;
  }
}

QuantKernel quant_kernel_for(int64_t M) {
  if (M >= kQuantAmxMinRows && quant_kernel_supported(QuantKernel::Amx)) return QuantKernel::Amx;
  return quant_kernel_supported(QuantKernel::Vnni) ? QuantKernel::Vnni : QuantKernel::Portable;
}

const char* quant_kernel_name(QuantKernel k) {
  switch (k) {
    case QuantKernel::Vnni: return "vnni";
    case QuantKernel::Amx: return "amx-int8";
    case QuantKernel::Portable: return "portable";
    default: return "auto";
  }
}

void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows& out) {
  if (K % kG != 0) fail(ErrorKind::Internal, "quantize_activations: ", K, " columns are not a multiple of ", kG);
  // Rows past M are zeros only where the AMX kernel may run: its tiles load 16 rows at a time. The
  // VNNI and portable kernels read M rows, and zeroing 31 rows at every one-row GEMM cost ~1% of
  // a decode step.
  const int64_t G = K / kG, padded = quant_kernel_supported(QuantKernel::Amx) ? ceil_div(M, 16) * 16 : M;
  out.rows = M;
  out.cols = K;
  out.q.resize(static_cast<std::size_t>(padded * K));
  std::memset(out.q.as<int8_t>() + M * K, 0, static_cast<std::size_t>((padded - M) * K));
  for (AlignedBuffer* b : {&out.dx, &out.qinit, &out.xsum, &out.qsum}) {
    b->resize(static_cast<std::size_t>(padded * G) * 4);
    std::memset(b->as<unsigned char>() + M * G * 4, 0, static_cast<std::size_t>((padded - M) * G) * 4);
  }
  const bool avx512 = quant_kernel_supported(QuantKernel::Vnni);
  auto group = [&](int64_t i) {
    GroupQuant gq;
    if (avx512)
      quantize_group_avx512(x + i * kG, out.q.as<int8_t>() + i * kG, gq);
    else
      quantize_group(x + i * kG, out.q.as<int8_t>() + i * kG, gq);
    out.dx.as<float>()[i] = gq.dx;
    out.qinit.as<int32_t>()[i] = -128 * gq.qsum;
    out.xsum.as<float>()[i] = gq.xsum;
    out.qsum.as<float>()[i] = static_cast<float>(gq.qsum);
  };
  // Groups are independent: a prompt's on every thread (perf, a one-sequence prompt: 7% of the
  // second thread's waits fell in this loop on the first).
  parallel_for(M * G, M * K >= 32768, group);
}

void quant_pack_plain(WeightScheme s, const void* plain, bool bf16, int64_t N, int64_t K, uint8_t* out) {
  if (!is_group_quantized(s) || K % kG != 0) fail(ErrorKind::Internal, "quant_pack_plain: not a q8/q4/int4 matrix of whole groups");
  const int64_t row_bytes = quant_row_bytes(s, K), row_scales = quant_row_scales(s, K);
  std::vector<uint8_t> q(static_cast<std::size_t>(N * row_bytes));
  std::vector<uint16_t> scales(static_cast<std::size_t>(N * row_scales));
  std::vector<uint8_t> levels(s == WeightScheme::Int4 ? static_cast<std::size_t>(N * (K / kG)) : 0);
  // Rows are independent: the same bytes whatever the thread count.
#pragma omp parallel if (!omp_in_parallel() && N >= 64)
  {
    std::vector<float> row(static_cast<std::size_t>(K));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
      const float* x = static_cast<const float*>(plain) + r * K;
      if (bf16) {
        bf16_to_f32(static_cast<const uint16_t*>(plain) + r * K, row.data(), static_cast<std::size_t>(K));
        x = row.data();
      }
      quantize_rows(s, x, 1, K, q.data() + r * row_bytes, scales.data() + r * row_scales,
                    levels.empty() ? nullptr : levels.data() + r * (K / kG));
    }
  }
  quant_pack(s, q.data(), scales.data(), N, K, out, levels.empty() ? nullptr : levels.data());
}

int64_t quant_blocked_bytes(WeightScheme s, int64_t N, int64_t K) {
  return ceil_div(N, kNB) * (K / kG) * chunk_bytes(s);
}

namespace {

// One whole block of 16 rows of pack_q4_blocked (below) with AVX-512: a group's 16 x 16 stored
// bytes in four registers (four rows each, a row per 128-bit lane), the nibbles regrouped per lane
// as there, a 16 x 4 transpose of 32-bit words into the chunk's four 64-byte rows, and each row's
// two scales by one gather. The streaming cache packs on the cores that compute: at 2x on the bench shape a load
// took 0.17 ms, 0.1 ms of it this packing, on the critical path of a one-sequence step.
// int4 (scales null) takes the values only: its scales are copied after.
__attribute__((target("avx512f,avx512bw"))) void pack_q4_block16(const uint8_t* q, const uint16_t* scales, int64_t G, int64_t row_bytes,
                                                                 int64_t row_scales, int64_t cb, uint8_t* block) {
  const int64_t vb = value_bytes(WeightScheme::Q4);
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  // word 4l + j of a register (lane l's word j) to position 4j + l
  const __m512i by_word = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m512i scale_at = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                              _mm512_set1_epi32(static_cast<int>(row_scales * 2)));
  for (int64_t g = 0; g < G; ++g) {
    uint8_t* chunk = block + g * cb;
    __m512i t[4];
    for (int r4 = 0; r4 < 4; ++r4) {
      const uint8_t* src = q + 4 * r4 * row_bytes + g * (kG / 2);
      __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + row_bytes)), 1);
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * row_bytes)), 2);
      v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 3 * row_bytes)), 3);
      const __m512i b = _mm512_bsrli_epi128(v, 8);  // each lane's bytes 8-15 at 0-7
      const __m512i even = _mm512_or_si512(_mm512_and_si512(v, low4), _mm512_slli_epi16(_mm512_and_si512(b, low4), 4));
      const __m512i odd = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), low4), _mm512_andnot_si512(low4, b));
      t[r4] = _mm512_permutexvar_epi32(by_word, _mm512_unpacklo_epi8(even, odd));
    }
    const __m512i p = _mm512_shuffle_i32x4(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                  r = _mm512_shuffle_i32x4(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512i u = _mm512_shuffle_i32x4(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)),
                  w = _mm512_shuffle_i32x4(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2));
    _mm512_storeu_si512(chunk, _mm512_shuffle_i32x4(p, r, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512(chunk + 64, _mm512_shuffle_i32x4(p, r, _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_si512(chunk + 128, _mm512_shuffle_i32x4(u, w, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512(chunk + 192, _mm512_shuffle_i32x4(u, w, _MM_SHUFFLE(3, 1, 3, 1)));
    if (!scales) continue;
    const __m512i sc = _mm512_i32gather_epi32(scale_at, scales + 2 * g, 1);  // row n's (d, m) pair as one word
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(chunk + vb), _mm512_cvtepi32_epi16(sc));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(chunk + vb + 32), _mm512_cvtepi32_epi16(_mm512_srli_epi32(sc, 16)));
  }
}

// int4's scales and level bytes of rows n0 .. n0 + lanes into their block's chunks.
void pack_int4_scales(const uint16_t* scales, const uint8_t* levels, int64_t n0, int64_t lanes, int64_t G, uint8_t* block) {
  const int64_t cb = chunk_bytes(WeightScheme::Int4), vb = value_bytes(WeightScheme::Int4);
  for (int64_t g = 0; g < G; ++g)
    for (int64_t lane = 0; lane < lanes; ++lane) {
      std::memcpy(block + g * cb + vb + 2 * lane, scales + (n0 + lane) * G + g, 2);
      block[g * cb + vb + 32 + lane] = levels[(n0 + lane) * G + g];
    }
}

// q4 into the blocked layout, a block of 16 rows at a time so that each chunk is written whole.
// Stored: byte i of a group holds k = 2i (low) and 2i + 1 (high). Blocked: byte m of a row's 16
// holds k = m (low) and 16 + m (high), so from source bytes a = src[i] and b = src[8 + i]: m = 2i
// takes both low nibbles, m = 2i + 1 both high ones. The streaming cache packs every expert it
// reads, so this runs a row's group in a few register operations (0.46 -> 0.1 ms an expert of the
// bench shape), not nibble by nibble.
// int4 takes the same values; its 16-bit scales and level bytes ([N, K / 32] each) fill the rest
// of each chunk.
void pack_q4_blocked(WeightScheme s, const uint8_t* q, const uint16_t* scales, const uint8_t* levels, int64_t N, int64_t K, uint8_t* out) {
  const int64_t G = K / kG, cb = chunk_bytes(s), vb = value_bytes(s);
  const int64_t row_bytes = quant_row_bytes(s, K), row_scales = quant_row_scales(s, K);
  constexpr uint64_t kLow = 0x0F0F0F0F0F0F0F0FULL;
  const bool avx512 = cpu_features().avx512bw;
  for (int64_t n0 = 0; n0 < N; n0 += kNB) {
    const int64_t lanes = std::min(kNB, N - n0);
    if (avx512 && lanes == kNB) {
      pack_q4_block16(q + n0 * row_bytes, s == WeightScheme::Q4 ? scales + n0 * row_scales : nullptr, G, row_bytes, row_scales, cb,
                      out + (n0 / kNB) * G * cb);
      if (s == WeightScheme::Int4) pack_int4_scales(scales, levels, n0, lanes, G, out + (n0 / kNB) * G * cb);
      continue;
    }
    for (int64_t g = 0; g < G; ++g) {
      uint8_t* chunk = out + ((n0 / kNB) * G + g) * cb;
      for (int64_t lane = 0; lane < lanes; ++lane) {
        const uint8_t* src = q + (n0 + lane) * row_bytes + g * (kG / 2);
        uint64_t a, b;
        std::memcpy(&a, src, 8);
        std::memcpy(&b, src + 8, 8);
        const uint64_t even = (a & kLow) | ((b & kLow) << 4), odd = ((a >> 4) & kLow) | (b & ~kLow);
        alignas(16) uint32_t m16[4];
        _mm_store_si128(reinterpret_cast<__m128i*>(m16),
                        _mm_unpacklo_epi8(_mm_cvtsi64_si128(static_cast<long long>(even)), _mm_cvtsi64_si128(static_cast<long long>(odd))));
        for (int j = 0; j < 4; ++j) std::memcpy(chunk + 64 * j + 4 * lane, &m16[j], 4);
        if (s == WeightScheme::Int4) continue;
        const uint16_t* sc = scales + (n0 + lane) * row_scales + 2 * g;
        std::memcpy(chunk + vb + 2 * lane, sc, 2);
        std::memcpy(chunk + vb + 32 + 2 * lane, sc + 1, 2);
      }
    }
    if (s == WeightScheme::Int4) pack_int4_scales(scales, levels, n0, lanes, G, out + (n0 / kNB) * G * cb);
  }
}

}  // namespace

void quant_pack(WeightScheme s, const uint8_t* q, const uint16_t* scales, int64_t N, int64_t K, uint8_t* out, const uint8_t* levels) {
  if (!is_group_quantized(s) || K % kG != 0) fail(ErrorKind::Internal, "quant_pack: not a q8/q4/int4 matrix of whole groups");
  if (s == WeightScheme::Int4 && !levels) fail(ErrorKind::Internal, "quant_pack: int4 needs its level bytes");
  const int64_t G = K / kG, cb = chunk_bytes(s), vb = value_bytes(s);
  // Padding rows stand for weight 0 (q4: level 0 with scale and minimum 0; q8 below).
  if (N % kNB != 0 || !nibbles(s)) std::memset(out, 0, static_cast<std::size_t>(quant_blocked_bytes(s, N, K)));
  if (nibbles(s)) return pack_q4_blocked(s, q, scales, levels, N, K, out);
  const int64_t row_bytes = quant_row_bytes(s, K), row_scales = quant_row_scales(s, K);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t lane = n % kNB;
    for (int64_t g = 0; g < G; ++g) {
      uint8_t* chunk = out + ((n / kNB) * G + g) * cb;
      const auto* src = reinterpret_cast<const int8_t*>(q) + n * row_bytes + g * kG;
      for (int j = 0; j < 8; ++j)
        for (int t = 0; t < 4; ++t) chunk[64 * j + 4 * lane + t] = static_cast<uint8_t>(src[4 * j + t] + 128);
      std::memcpy(chunk + vb + 2 * lane, scales + n * row_scales + g, 2);
    }
  }
  // q8's stored byte is 128 for weight 0; its scale is 0 already.
  for (int64_t n = N; n < ceil_div(N, kNB) * kNB; ++n)
    for (int64_t g = 0; g < G; ++g)
      for (int j = 0; j < 8; ++j) std::memset(out + ((n / kNB) * G + g) * cb + 64 * j + 4 * (n % kNB), 128, 4);
}

namespace {
template <WeightScheme S>
int64_t find_bad_scale(int64_t N, int64_t K, const uint8_t* w) {
  const int64_t chunks = ceil_div(N, kNB) * (K / kG);
  for (int64_t i = 0; i < chunks; ++i)
    for (int n = 0; n < kNB; ++n) {
      float dw, mw;
      lane_scales<S>(w + i * chunk_bytes(S) + value_bytes(S), n, dw, mw);
      if (!std::isfinite(dw) || !std::isfinite(mw)) return i * kNB + n;
    }
  return -1;
}

template <WeightScheme S>
constexpr GroupKernels kernels_of() {
  return {S, run_block<S>, amx_pair<S>, find_bad_scale<S>};
}

const GroupKernels& group_kernels(WeightScheme s) {
  static constexpr GroupKernels kRows[] = {kernels_of<WeightScheme::Q8>(), kernels_of<WeightScheme::Q4>(),
                                           kernels_of<WeightScheme::Int4>()};
  for (const GroupKernels& k : kRows)
    if (k.scheme == s) return k;
  fail(ErrorKind::Internal, "quant_matmul: ", weight_scheme_row(s).name, " has no group kernels");
}
}  // namespace

int64_t quant_blocked_find_bad(WeightScheme s, int64_t N, int64_t K, const uint8_t* w) {
  return group_kernels(s).find_bad(N, K, w);
}

void quant_matmul(WeightScheme s, const QuantizedRows& x, int64_t N, const uint8_t* w, float* y, QuantKernel kernel) {
  if (!is_group_quantized(s)) fail(ErrorKind::Internal, "quant_matmul: not a q8/q4/int4 matrix");
  if (kernel == QuantKernel::Auto) kernel = quant_kernel_for(x.rows);
  if (!quant_kernel_supported(kernel)) fail(ErrorKind::Internal, "quant_matmul: this CPU has no ", quant_kernel_name(kernel), " kernel");
  if (x.rows == 0) return;
  if (kernel == QuantKernel::Amx) return amx_matmul(s, x, N, w, y);
  const bool vnni = kernel == QuantKernel::Vnni;
  const int64_t M = x.rows, nblocks = ceil_div(N, kNB);
  const int64_t block_bytes = (x.cols / kG) * chunk_bytes(s), pass_rows = rows_per_pass(s);
  const GroupKernels& k = group_kernels(s);
  auto block = [&](int64_t nb) {
    const uint8_t* wb = w + nb * block_bytes;
    const int64_t n0 = nb * kNB, width = std::min<int64_t>(kNB, N - n0);
    alignas(64) float out[kMaxRowsPerPass * kNB];
    // Every row pass over this block while it sits in L2.
    for (int64_t r0 = 0; r0 < M; r0 += pass_rows) {
      const int R = static_cast<int>(std::min<int64_t>(pass_rows, M - r0));
      const RowPass p = row_pass(x, r0);
      k.block(p, R, wb, out, vnni);
      for (int r = 0; r < R; ++r) std::memcpy(y + (r0 + r) * N + n0, out + r * kNB, static_cast<std::size_t>(width) * 4);
    }
  };
  parallel_for(nblocks, true, block);
}

}  // namespace moerun

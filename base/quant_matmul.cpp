// Quantized matmul: activation quantization, the blocked weight form, and the VNNI and portable
// kernels over it (same integer sums and the same float operations in the same order).
#include "base/quant_matmul.hpp"

#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace moerun {
namespace {

constexpr int64_t kG = kQuantGroup;
constexpr int64_t kNB = 16;  // output rows per block: one 32-bit lane each
constexpr int kRowsPerPass = 4;
constexpr int64_t kPrefetchChunks = 4;  // groups ahead a block's stream is prefetched

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool is_q4(WeightScheme s) { return s == WeightScheme::Q4; }
// Bytes of one (block, group) chunk: the interleaved values, then the scales.
int64_t value_bytes(WeightScheme s) { return is_q4(s) ? 256 : 512; }
int64_t chunk_bytes(WeightScheme s) { return value_bytes(s) + (is_q4(s) ? 64 : 32); }

// The kernels' view of one pass: R rows starting at `row` of x.
struct RowPass {
  const int8_t* q;
  const float* dx;
  const int32_t* qsum;
  const float* xsum;
  int64_t K, G;
};

RowPass row_pass(const QuantizedRows& x, int64_t row) {
  const int64_t G = x.cols / kG;
  return {x.q.as<int8_t>() + row * x.cols, x.dx.as<float>() + row * G, x.qsum.as<int32_t>() + row * G,
          x.xsum.as<float>() + row * G, x.cols, G};
}

int32_t x_quad(const RowPass& p, int r, int64_t g, int j) {
  int32_t v;
  std::memcpy(&v, p.q + r * p.K + g * kG + 4 * j, 4);
  return v;
}

// y[r][n] for the B blocks at `w` (consecutive), R rows of the pass; out [R][B * 16].
template <bool Q4, int R, int B>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void vnni_blocks(const RowPass& p, const uint8_t* w, float* out) {
  constexpr int64_t vb = Q4 ? 256 : 512, cb = vb + (Q4 ? 64 : 32);
  const int64_t block_bytes = p.G * cb;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
  // Two integer sums per output where registers allow: halves the vpdpbusd dependency chain.
  constexpr int S = R * B <= 4 ? 2 : 1;
  for (int64_t g = 0; g < p.G; ++g) {
    __m512i ia[S][R][B];
    for (int h = 0; h < S; ++h)
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < B; ++b) ia[h][r][b] = _mm512_setzero_si512();
    for (int b = 0; b < B; ++b)
      for (int line = 0; line < cb; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w + b * block_bytes + (g + kPrefetchChunks) * cb + line), _MM_HINT_T0);
    for (int j = 0; j < (Q4 ? 4 : 8); ++j) {
      __m512i lo[B], hi[B];
      for (int b = 0; b < B; ++b) {
        const __m512i v = _mm512_loadu_si512(w + b * block_bytes + g * cb + 64 * j);
        lo[b] = Q4 ? _mm512_and_si512(v, low4) : v;
        if constexpr (Q4) hi[b] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
      for (int r = 0; r < R; ++r) {
        const __m512i xl = _mm512_set1_epi32(x_quad(p, r, g, j));
        for (int b = 0; b < B; ++b) ia[Q4 ? 0 : j % S][r][b] = _mm512_dpbusd_epi32(ia[Q4 ? 0 : j % S][r][b], lo[b], xl);
        if constexpr (Q4) {
          const __m512i xh = _mm512_set1_epi32(x_quad(p, r, g, j + 4));
          for (int b = 0; b < B; ++b) ia[S - 1][r][b] = _mm512_dpbusd_epi32(ia[S - 1][r][b], hi[b], xh);
        }
      }
    }
    if constexpr (S == 2)
      for (int r = 0; r < R; ++r)
        for (int b = 0; b < B; ++b) ia[0][r][b] = _mm512_add_epi32(ia[0][r][b], ia[1][r][b]);
    __m512 dw[B], mw[B];
    for (int b = 0; b < B; ++b) {
      const uint8_t* sc = w + b * block_bytes + g * cb + vb;
      dw[b] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc)));
      if constexpr (Q4) mw[b] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sc + 32)));
    }
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_set1_ps(p.dx[r * p.G + g]);
      const __m512i off = _mm512_set1_epi32(Q4 ? 0 : 128 * p.qsum[r * p.G + g]);
      for (int b = 0; b < B; ++b) {
        const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(ia[0][r][b], off));
        acc[r][b] = _mm512_fmadd_ps(f, _mm512_mul_ps(dw[b], dx), acc[r][b]);
        if constexpr (Q4) acc[r][b] = _mm512_fmadd_ps(mw[b], _mm512_set1_ps(p.xsum[r * p.G + g]), acc[r][b]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) _mm512_storeu_ps(out + (r * B + b) * kNB, acc[r][b]);
}

// The same sums lane by lane: integer dot products, then the float steps in the kernel's order.
template <bool Q4>
void portable_blocks(const RowPass& p, int R, int B, const uint8_t* w, float* out) {
  constexpr int64_t vb = Q4 ? 256 : 512, cb = vb + (Q4 ? 64 : 32);
  const int64_t block_bytes = p.G * cb;
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < kNB; ++n) {
        float acc = 0.0f;
        for (int64_t g = 0; g < p.G; ++g) {
          const uint8_t* chunk = w + b * block_bytes + g * cb;
          const int8_t* xq = p.q + r * p.K + g * kG;
          int32_t ia = 0;
          for (int j = 0; j < (Q4 ? 4 : 8); ++j)
            for (int t = 0; t < 4; ++t) {
              const uint8_t v = chunk[64 * j + 4 * n + t];
              ia += (Q4 ? (v & 15) : v) * xq[4 * j + t];
              if (Q4) ia += (v >> 4) * xq[16 + 4 * j + t];
            }
          uint16_t bits[2];
          std::memcpy(bits, chunk + vb + 2 * n, 2);
          if (Q4) std::memcpy(bits + 1, chunk + vb + 32 + 2 * n, 2);
          const float f = static_cast<float>(ia - (Q4 ? 0 : 128 * p.qsum[r * p.G + g]));
          acc = std::fma(f, f16_to_f32(bits[0]) * p.dx[r * p.G + g], acc);
          if (Q4) acc = std::fma(f16_to_f32(bits[1]), p.xsum[r * p.G + g], acc);
        }
        out[(r * B + b) * kNB + n] = acc;
      }
}

template <bool Q4, int R>
void vnni_rows(const RowPass& p, int B, const uint8_t* w, float* out) {
  if (B == 2) vnni_blocks<Q4, R, 2>(p, w, out);
  else vnni_blocks<Q4, R, 1>(p, w, out);
}

template <bool Q4>
void run_blocks(const RowPass& p, int R, int B, const uint8_t* w, float* out, bool vnni) {
  if (!vnni) return portable_blocks<Q4>(p, R, B, w, out);
  switch (R) {
    case 1: return vnni_rows<Q4, 1>(p, B, w, out);
    case 2: return vnni_rows<Q4, 2>(p, B, w, out);
    case 3: return vnni_rows<Q4, 3>(p, B, w, out);
    default: return vnni_rows<Q4, 4>(p, B, w, out);
  }
}


// ---- The Bf16 form: weights dequantized into AMX B tiles, activations as bf16 A tiles. ----

// A 16x32 chunk dequantized is exactly one B tile of TDPBF16PS: 16 rows (k-pairs) of 64 bytes, lane n
// of row kp holding bf16(w[n][2kp]) | bf16(w[n][2kp+1]) << 16.
constexpr int64_t kTileBytes = 1024;

// Lane n = bf16(a[n]) | bf16(b[n]) << 16, both rounded to nearest even.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline __m512i bf16_pairs(__m512 a, __m512 b) {
  alignas(64) static const uint16_t interleave[32] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i both = (__m512i)_mm512_cvtne2ps_pbh(b, a);  // words 0-15 a, 16-31 b
  return _mm512_permutexvar_epi16(_mm512_load_si512(interleave), both);
}

// The levels at bit `shift` of each lane (masked by `mask`), times d plus m.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline __m512 level_value(__m512i v, int shift, __m512i mask, __m512 d, __m512 m) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(v, static_cast<unsigned>(shift)), mask)), d, m);
}

template <bool Q4>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void dequantize_chunk_tile(const uint8_t* chunk, uint8_t* tile) {
  constexpr int64_t vb = Q4 ? 256 : 512;
  const __m512i byte = _mm512_set1_epi32(Q4 ? 0x0f : 0xff);
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + vb)));
  // q8 stores q + 128: (q + 128) d - 128 d is q d exactly (one rounding, of an exact product).
  const __m512 m = Q4 ? _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + vb + 32)))
                      : _mm512_mul_ps(d, _mm512_set1_ps(-128.0f));
  for (int j = 0; j < (Q4 ? 4 : 8); ++j) {
    const __m512i v = _mm512_loadu_si512(chunk + 64 * j);
    // q8: k = 4j + byte. q4: low nibbles k = 4j + byte, high nibbles k = 16 + 4j + byte.
    uint8_t* t = tile + 64 * 2 * j;
    _mm512_store_si512(t, bf16_pairs(level_value(v, 0, byte, d, m), level_value(v, 8, byte, d, m)));
    _mm512_store_si512(t + 64, bf16_pairs(level_value(v, 16, byte, d, m), level_value(v, 24, byte, d, m)));
    if constexpr (Q4) {
      _mm512_store_si512(t + 64 * 8, bf16_pairs(level_value(v, 4, byte, d, m), level_value(v, 12, byte, d, m)));
      _mm512_store_si512(t + 64 * 9, bf16_pairs(level_value(v, 20, byte, d, m), level_value(v, 28, byte, d, m)));
    }
  }
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// tmm0-3: C (2 row blocks x 2 column blocks), tmm4-5: A, tmm6-7: B; all 16 rows of 64 bytes.
__attribute__((target("amx-tile,amx-bf16"))) void amx_row_blocks(const uint16_t* xb, int64_t rows_padded, int64_t K, const uint8_t* tiles,
                                                                 int64_t tiles_per_block, bool two, float* c, int64_t M, float* y,
                                                                 int64_t N, int64_t n0) {
  const int64_t G = K / kG, stride = K * 2;
  for (int64_t m0 = 0; m0 < rows_padded; m0 += 32) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint16_t* a0 = xb + m0 * K;
    for (int64_t g = 0; g < G; ++g) {
      _tile_loadd(4, a0 + g * kG, stride);
      _tile_loadd(5, a0 + 16 * K + g * kG, stride);
      _tile_loadd(6, tiles + g * kTileBytes, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(2, 5, 6);
      if (two) {
        _tile_loadd(7, tiles + (tiles_per_block + g) * kTileBytes, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    _tile_stored(0, c, 64);
    _tile_stored(1, c + 256, 64);
    _tile_stored(2, c + 512, 64);
    _tile_stored(3, c + 768, 64);
    // c: [row block][column block][16][16]
    const int64_t width = std::min<int64_t>(two ? 32 : 16, N - n0);
    for (int64_t r = m0; r < std::min(m0 + 32, M); ++r)
      for (int64_t n = 0; n < width; ++n) y[r * N + n0 + n] = c[((r - m0) / 16 * 2 + n / 16) * 256 + (r - m0) % 16 * 16 + n % 16];
  }
}

// tmm0-7 all 16 rows of 64 bytes. A static object: GCC 12's _tile_loadconfig does not tell the
// compiler it reads memory, and the stores that fill a local one were dropped (an invalid config).
constexpr TileConfig tile_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  return cfg;
}
const TileConfig kTileConfig = tile_config();

__attribute__((target("amx-tile"))) void amx_configure() { _tile_loadconfig(&kTileConfig); }
__attribute__((target("amx-tile"))) void amx_release() { _tile_release(); }

void amx_matmul(WeightScheme s, const QuantizedRows& x, int64_t N, const uint8_t* w, float* y) {
  const int64_t K = x.cols, G = K / kG, nblocks = ceil_div(N, kNB), pairs = ceil_div(nblocks, 2);
  const int64_t block_bytes = G * chunk_bytes(s), rows_padded = ceil_div(x.rows, 32) * 32;
#pragma omp parallel if (!omp_in_parallel())
  {
    // A thread's B tiles for one pair of blocks (2 x K/32 KiB: in L2), and its C tiles.
    thread_local AlignedBuffer tiles, cbuf;
    tiles.resize(static_cast<std::size_t>(2 * G * kTileBytes));
    cbuf.resize(4 * 256 * sizeof(float));
    // The tile state is the thread's: configured here, released before anything else (oneDNN) runs.
    amx_configure();
#pragma omp for schedule(static)
    for (int64_t pi = 0; pi < pairs; ++pi) {
      const int64_t nb = 2 * pi;
      const bool two = nb + 1 < nblocks;
      for (int b = 0; b < (two ? 2 : 1); ++b)
        for (int64_t g = 0; g < G; ++g) {
          const uint8_t* chunk = w + (nb + b) * block_bytes + g * chunk_bytes(s);
          uint8_t* tile = tiles.as<uint8_t>() + (b * G + g) * kTileBytes;
          if (is_q4(s)) dequantize_chunk_tile<true>(chunk, tile);
          else dequantize_chunk_tile<false>(chunk, tile);
        }
      amx_row_blocks(x.bf16.as<uint16_t>(), rows_padded, K, tiles.as<uint8_t>(), G, two, cbuf.as<float>(), x.rows, y, N, nb * kNB);
    }
    amx_release();
  }
}

// Without AMX (an explicit Bf16 request): the same products in float, in k order.
void portable_bf16_matmul(WeightScheme s, const QuantizedRows& x, int64_t N, const uint8_t* w, float* y) {
  const int64_t K = x.cols, G = K / kG, block_bytes = G * chunk_bytes(s), vb = value_bytes(s);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<float> wn(static_cast<std::size_t>(K));
    for (int64_t g = 0; g < G; ++g) {
      const uint8_t* chunk = w + (n / kNB) * block_bytes + g * chunk_bytes(s);
      const int64_t lane = n % kNB;
      uint16_t db, mb = 0;
      std::memcpy(&db, chunk + vb + 2 * lane, 2);
      if (is_q4(s)) std::memcpy(&mb, chunk + vb + 32 + 2 * lane, 2);
      const float d = f16_to_f32(db), m = is_q4(s) ? f16_to_f32(mb) : -128.0f * d;
      for (int64_t k = 0; k < kG; ++k) {
        const int64_t j = is_q4(s) ? (k % 16) / 4 : k / 4, t = k % 4;
        const uint8_t v = chunk[64 * j + 4 * lane + t];
        const int level = is_q4(s) ? (k < 16 ? v & 15 : v >> 4) : v;
        wn[static_cast<std::size_t>(g * kG + k)] = bf16_to_f32(f32_to_bf16(std::fma(static_cast<float>(level), d, m)));
      }
    }
    for (int64_t r = 0; r < x.rows; ++r) {
      float acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += bf16_to_f32(x.bf16.as<uint16_t>()[r * K + k]) * wn[static_cast<std::size_t>(k)];
      y[r * N + n] = acc;
    }
  }
}

}  // namespace

bool quant_amx_supported() {
  static const bool ok = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !bf16 || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512bf16")) return false;
    // Linux hands out the tile data state only on request (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return ok;
}

bool quant_vnni_supported() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows& out, ActivationForm form) {
  if (K % kG != 0) fail(ErrorKind::Internal, "quantize_activations: ", K, " columns are not a multiple of ", kG);
  if (form == ActivationForm::Auto)
    form = M >= kQuantAmxMinRows && quant_amx_supported() ? ActivationForm::Bf16 : ActivationForm::Int8;
  const int64_t G = K / kG;
  out.rows = M;
  out.cols = K;
  out.form = form;
  if (form == ActivationForm::Bf16) {
    const int64_t padded = ceil_div(M, 32) * 32;
    out.bf16.resize(static_cast<std::size_t>(padded * K) * 2);
    f32_to_bf16(x, out.bf16.as<uint16_t>(), static_cast<std::size_t>(M * K));
    std::memset(out.bf16.as<uint16_t>() + M * K, 0, static_cast<std::size_t>((padded - M) * K) * 2);
    return;
  }
  out.q.resize(static_cast<std::size_t>(M * K));
  for (AlignedBuffer* b : {&out.dx, &out.qsum, &out.xsum}) b->resize(static_cast<std::size_t>(M * G) * 4);
  for (int64_t i = 0; i < M * G; ++i) {
    const float* xg = x + i * kG;
    float amax = 0.0f, sum = 0.0f;
    for (int64_t k = 0; k < kG; ++k) {
      amax = std::max(amax, std::fabs(xg[k]));
      sum += xg[k];
    }
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int8_t* q = out.q.as<int8_t>() + i * kG;
    int32_t qs = 0;
    for (int64_t k = 0; k < kG; ++k) {
      q[k] = static_cast<int8_t>(std::nearbyint(xg[k] * id));
      qs += q[k];
    }
    out.dx.as<float>()[i] = amax / 127.0f;
    out.qsum.as<int32_t>()[i] = qs;
    out.xsum.as<float>()[i] = sum;
  }
}

int64_t quant_blocked_bytes(WeightScheme s, int64_t N, int64_t K) { return ceil_div(N, kNB) * (K / kG) * chunk_bytes(s); }

void quant_pack(WeightScheme s, const uint8_t* q, const uint16_t* scales, int64_t N, int64_t K, uint8_t* out) {
  if (!is_group_quantized(s) || K % kG != 0) fail(ErrorKind::Internal, "quant_pack: not a q8/q4 matrix of whole groups");
  std::memset(out, 0, static_cast<std::size_t>(quant_blocked_bytes(s, N, K)));
  const int64_t G = K / kG, cb = chunk_bytes(s), vb = value_bytes(s);
  const int64_t row_bytes = quant_row_bytes(s, K), row_scales = quant_row_scales(s, K);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t lane = n % kNB;
    for (int64_t g = 0; g < G; ++g) {
      uint8_t* chunk = out + ((n / kNB) * G + g) * cb;
      if (is_q4(s)) {
        // Stored: byte i of the group holds k = 2i (low) and 2i + 1 (high).
        const uint8_t* src = q + n * row_bytes + g * (kG / 2);
        auto level = [&](int64_t k) { return static_cast<uint8_t>((src[k / 2] >> (4 * (k % 2))) & 15); };
        for (int j = 0; j < 4; ++j)
          for (int t = 0; t < 4; ++t)
            chunk[64 * j + 4 * lane + t] = static_cast<uint8_t>(level(4 * j + t) | (level(16 + 4 * j + t) << 4));
        std::memcpy(chunk + vb + 2 * lane, scales + n * row_scales + 2 * g, 2);
        std::memcpy(chunk + vb + 32 + 2 * lane, scales + n * row_scales + 2 * g + 1, 2);
      } else {
        const auto* src = reinterpret_cast<const int8_t*>(q) + n * row_bytes + g * kG;
        for (int j = 0; j < 8; ++j)
          for (int t = 0; t < 4; ++t) chunk[64 * j + 4 * lane + t] = static_cast<uint8_t>(src[4 * j + t] + 128);
        std::memcpy(chunk + vb + 2 * lane, scales + n * row_scales + g, 2);
      }
    }
  }
  // Padding rows stand for weight 0: q8's stored byte is 128 there, its scale 0 already.
  if (!is_q4(s))
    for (int64_t n = N; n < ceil_div(N, kNB) * kNB; ++n)
      for (int64_t g = 0; g < G; ++g)
        for (int j = 0; j < 8; ++j) std::memset(out + ((n / kNB) * G + g) * cb + 64 * j + 4 * (n % kNB), 128, 4);
}

int64_t quant_blocked_scales(WeightScheme s, int64_t N, int64_t K) {
  return ceil_div(N, kNB) * (K / kG) * (chunk_bytes(s) - value_bytes(s)) / 2;
}

void quant_blocked_copy_scales(WeightScheme s, int64_t N, int64_t K, const uint8_t* w, uint16_t* out) {
  const int64_t chunks = ceil_div(N, kNB) * (K / kG), sb = chunk_bytes(s) - value_bytes(s);
  for (int64_t i = 0; i < chunks; ++i) std::memcpy(out + i * sb / 2, w + i * chunk_bytes(s) + value_bytes(s), static_cast<std::size_t>(sb));
}

void quant_matmul(WeightScheme s, const QuantizedRows& x, int64_t N, const uint8_t* w, float* y, bool portable) {
  if (!is_group_quantized(s)) fail(ErrorKind::Internal, "quant_matmul: not a q8/q4 matrix");
  if (x.form == ActivationForm::Bf16) {
    if (quant_amx_supported()) amx_matmul(s, x, N, w, y);
    else portable_bf16_matmul(s, x, N, w, y);
    return;
  }
  const bool vnni = !portable && quant_vnni_supported();
  const int64_t M = x.rows, nblocks = ceil_div(N, kNB), pairs = ceil_div(nblocks, 2);
  const int64_t block_bytes = (x.cols / kG) * chunk_bytes(s);
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t pi = 0; pi < pairs; ++pi) {
    const int64_t nb = 2 * pi;
    const int B = nb + 1 < nblocks ? 2 : 1;
    const uint8_t* wb = w + nb * block_bytes;
    alignas(64) float out[kRowsPerPass * 2 * kNB];
    // Every row pass over this pair while its blocks sit in L2.
    for (int64_t r0 = 0; r0 < M; r0 += kRowsPerPass) {
      const int R = static_cast<int>(std::min<int64_t>(kRowsPerPass, M - r0));
      const RowPass p = row_pass(x, r0);
      if (is_q4(s)) run_blocks<true>(p, R, B, wb, out, vnni);
      else run_blocks<false>(p, R, B, wb, out, vnni);
      const int64_t n0 = nb * kNB, width = std::min<int64_t>(B * kNB, N - n0);
      for (int r = 0; r < R; ++r) std::memcpy(y + (r0 + r) * N + n0, out + r * B * kNB, static_cast<std::size_t>(width) * 4);
    }
  }
}

}  // namespace moerun

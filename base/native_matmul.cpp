// Native-format matmul (mxfp4, fp8-block): the blocked form, and the AVX-512 and portable kernels
// over it, which run the same float operations in the same order (see the header).
#include "base/native_matmul.hpp"

#include <omp.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.hpp"
#include "base/native_quant.hpp"
#include "base/weight_dequant.hpp"

// GCC 12 warns that the AVX-512 intrinsics' own _mm512_undefined_* pass-through operands may be
// used uninitialized (they are not: the masks are all ones).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace moerun {
namespace {

constexpr int64_t kNB = 16;        // output rows per block: one float lane each
constexpr int64_t kG = kMxfp4Block;  // mxfp4: k per scale
constexpr int64_t kMxChunk = 256 + 16;  // mxfp4: a (block, group) chunk, values then scales
constexpr int kMaxRows = 4;        // rows of x per pass
constexpr float kFp8Widen = 256.0f;  // e4m3 bits as fp16 are the value / 256

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool is_mx(WeightScheme s) { return s == WeightScheme::Mxfp4; }
int64_t block_bytes(WeightScheme s, int64_t K) { return is_mx(s) ? (K / kG) * kMxChunk : K * kNB; }
int64_t fp8_scale_count(int64_t N, int64_t K) { return fp8_scale_rows(N) * fp8_scale_cols(K); }

// The 16 E2M1 values, the AVX-512 kernel's permute table.
struct E2m1Table {
  float v[16];
  E2m1Table() {
    for (int i = 0; i < 16; ++i) v[i] = dequant::e2m1(static_cast<uint8_t>(i));
  }
};
const E2m1Table kE2M1;

// The view of one call: x rows, the blocks' bytes, and the fp8 scale grid.
struct Pass {
  const float* x;     // row r0 of x
  int64_t K;
  const uint8_t* w;   // first block of the run
  const float* fp8_scales;  // the whole grid (fp8), or null
  int64_t nb0;        // index of the run's first block (fp8: its scale row)
};

float fp8_block_scale(const Pass& p, int64_t nb, int64_t kb) {
  return p.fp8_scales[((p.nb0 + nb) * kNB / kFp8Block) * fp8_scale_cols(p.K) + kb];
}

// ---- AVX-512: R rows x B blocks of 16 outputs, two FMA chains (even and odd k) per output. ----

template <int R, int B>
__attribute__((target("avx512f,avx512bw"))) void mx_avx512(const Pass& p, float* out) {
  const int64_t G = p.K / kG, bb = block_bytes(WeightScheme::Mxfp4, p.K);
  const __m512 table = _mm512_loadu_ps(kE2M1.v);
  __m512 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m512 te[R][B], to[R][B];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) te[r][b] = to[r][b] = _mm512_setzero_ps();
    const float* xg = p.x + g * kG;
    for (int j = 0; j < 4; ++j) {  // 8 k per 32-bit lane: nibble m of lane r is k = 8j + m of row r
      __m512i v[B];
      for (int b = 0; b < B; ++b) v[b] = _mm512_loadu_si512(p.w + b * bb + g * kMxChunk + 64 * j);
#pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) {
        __m512 w[B];
        for (int b = 0; b < B; ++b) w[b] = _mm512_permutexvar_ps(m == 0 ? v[b] : _mm512_srli_epi32(v[b], 4 * m), table);  // low 4 bits index
        for (int r = 0; r < R; ++r) {
          const __m512 xk = _mm512_set1_ps(xg[r * p.K + 8 * j + m]);
          for (int b = 0; b < B; ++b) {
            if (m % 2 == 0) te[r][b] = _mm512_fmadd_ps(w[b], xk, te[r][b]);
            else to[r][b] = _mm512_fmadd_ps(w[b], xk, to[r][b]);
          }
        }
      }
    }
    for (int b = 0; b < B; ++b) {
      // 2^(s - 127) as float bits s << 23; s = 0 is the subnormal 2^-127.
      const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p.w + b * bb + g * kMxChunk + 256)));
      const __m512i bits = _mm512_mask_mov_epi32(_mm512_slli_epi32(s, 23), _mm512_cmpeq_epi32_mask(s, _mm512_setzero_si512()),
                                                 _mm512_set1_epi32(0x00400000));
      const __m512 scale = _mm512_castsi512_ps(bits);
      for (int r = 0; r < R; ++r) acc[r][b] = _mm512_fmadd_ps(_mm512_add_ps(te[r][b], to[r][b]), scale, acc[r][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) _mm512_storeu_ps(out + (r * B + b) * kNB, acc[r][b]);
}

template <int R, int B>
__attribute__((target("avx512f,avx512bw,f16c"))) void fp8_avx512(const Pass& p, float* out) {
  const int64_t bb = block_bytes(WeightScheme::Fp8Block, p.K);
  const __m512i keep = _mm512_set1_epi16(static_cast<short>(0xBFFF));
  __m512 acc[R][B];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t k0 = 0, kb = 0; k0 < p.K; k0 += kFp8Block, ++kb) {
    const int64_t k1 = std::min(p.K, k0 + kFp8Block);
    __m512 te[R][B], to[R][B];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) te[r][b] = to[r][b] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = k0; k < k1; k += 2) {
      __m512 we[B], wo[B];
      for (int b = 0; b < B; ++b) {
        // Sign-extended, shifted by 7: sign at bit 15, exponent and mantissa in fp16's place, bit 14
        // (a copy of the sign) cleared: the fp16 of e4m3 / 256, subnormals included.
        const __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.w + b * bb + k * kNB)));
        const __m512i h = _mm512_and_si512(_mm512_slli_epi16(v, 7), keep);
        we[b] = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
        wo[b] = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
      }
      for (int r = 0; r < R; ++r) {
        const __m512 xe = _mm512_set1_ps(p.x[r * p.K + k]), xo = _mm512_set1_ps(p.x[r * p.K + k + 1]);
        for (int b = 0; b < B; ++b) {
          te[r][b] = _mm512_fmadd_ps(we[b], xe, te[r][b]);
          to[r][b] = _mm512_fmadd_ps(wo[b], xo, to[r][b]);
        }
      }
    }
    for (int b = 0; b < B; ++b) {
      const __m512 scale = _mm512_set1_ps(fp8_block_scale(p, b, kb) * kFp8Widen);
      for (int r = 0; r < R; ++r) acc[r][b] = _mm512_fmadd_ps(_mm512_add_ps(te[r][b], to[r][b]), scale, acc[r][b]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b) _mm512_storeu_ps(out + (r * B + b) * kNB, acc[r][b]);
}

// ---- Portable: the same operations lane by lane. ----

void portable_blocks(WeightScheme sch, const Pass& p, int R, int B, float* out) {
  const int64_t bb = block_bytes(sch, p.K);
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < B; ++b)
      for (int n = 0; n < kNB; ++n) {
        const float* x = p.x + r * p.K;
        const uint8_t* wb = p.w + b * bb;
        float acc = 0.0f;
        if (is_mx(sch)) {
          for (int64_t g = 0; g < p.K / kG; ++g) {
            float te = 0.0f, to = 0.0f;
            for (int pr = 0; pr < 16; ++pr) {  // the stored byte of k = 2pr, 2pr + 1: byte pr % 4 of lane n's dword pr / 4
              const uint8_t v = wb[g * kMxChunk + 64 * (pr / 4) + 4 * n + pr % 4];
              te = std::fma(dequant::e2m1(v & 15), x[g * kG + 2 * pr], te);
              to = std::fma(dequant::e2m1(v >> 4), x[g * kG + 2 * pr + 1], to);
            }
            acc = std::fma(te + to, dequant::e8m0(wb[g * kMxChunk + 256 + n]), acc);
          }
        } else {
          for (int64_t k0 = 0, kb = 0; k0 < p.K; k0 += kFp8Block, ++kb) {
            float te = 0.0f, to = 0.0f;
            for (int64_t k = k0; k < std::min(p.K, k0 + kFp8Block); k += 2) {
              te = std::fma(dequant::e4m3(wb[k * kNB + n]) / kFp8Widen, x[k], te);
              to = std::fma(dequant::e4m3(wb[(k + 1) * kNB + n]) / kFp8Widen, x[k + 1], to);
            }
            acc = std::fma(te + to, fp8_block_scale(p, b, kb) * kFp8Widen, acc);
          }
        }
        out[(r * B + b) * kNB + n] = acc;
      }
}

template <int R>
void avx512_rows(WeightScheme s, const Pass& p, int B, float* out) {
  // Up to 8 outputs' chains in flight: one row takes 4 blocks, more rows 2.
  if (is_mx(s)) {
    if (B == 4) return mx_avx512<R, 4>(p, out);
    if (B == 2) return mx_avx512<R, 2>(p, out);
    return mx_avx512<R, 1>(p, out);
  }
  if (B == 4) return fp8_avx512<R, 4>(p, out);
  if (B == 2) return fp8_avx512<R, 2>(p, out);
  return fp8_avx512<R, 1>(p, out);
}

void run_blocks(WeightScheme s, const Pass& p, int R, int B, float* out, bool avx512) {
  if (!avx512) return portable_blocks(s, p, R, B, out);
  switch (R) {
    case 1: return avx512_rows<1>(s, p, B, out);
    case 2: return avx512_rows<2>(s, p, B, out);
    case 3: return avx512_rows<3>(s, p, B, out);
    default: return avx512_rows<4>(s, p, B, out);
  }
}

// Blocks per kernel call for R rows: 4 for one row (decode), else 2.
int blocks_per_call(int R) { return R == 1 ? 4 : 2; }

}  // namespace

bool native_kernel_supported(NativeKernel k) {
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("f16c");
  return k == NativeKernel::Avx512 ? avx512 : true;
}

const char* native_kernel_name(NativeKernel k) {
  switch (k) {
    case NativeKernel::Avx512: return "avx512";
    case NativeKernel::Portable: return "portable";
    default: return "auto";
  }
}

int64_t native_blocked_bytes(WeightScheme s, int64_t N, int64_t K) {
  const int64_t blocks = ceil_div(N, kNB) * block_bytes(s, K);
  return is_mx(s) ? blocks : blocks + fp8_scale_count(N, K) * 4;
}

void native_pack(WeightScheme s, const uint8_t* values, const void* scales, int64_t N, int64_t K, uint8_t* out) {
  if (!is_native_quantized(s) || K % kG != 0) fail(ErrorKind::Internal, "native_pack: not an mxfp4/fp8-block matrix of whole groups of 32");
  const int64_t nblocks = ceil_div(N, kNB), bb = block_bytes(s, K);
  std::memset(out, 0, static_cast<std::size_t>(native_blocked_bytes(s, N, K)));
  if (is_mx(s)) {
    const auto* sc = static_cast<const uint8_t*>(scales);
    const int64_t G = K / kG;
    for (int64_t n = 0; n < nblocks * kNB; ++n)
      for (int64_t g = 0; g < G; ++g) {
        uint8_t* chunk = out + (n / kNB) * bb + g * kMxChunk;
        const int64_t lane = n % kNB;
        chunk[256 + lane] = n < N ? sc[n * G + g] : 127;  // padding: zeros times 1
        if (n >= N) continue;
        for (int i = 0; i < 16; ++i) chunk[64 * (i / 4) + 4 * lane + i % 4] = values[n * (K / 2) + g * 16 + i];
      }
    return;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) out[(n / kNB) * bb + k * kNB + n % kNB] = values[n * K + k];
  std::memcpy(out + nblocks * bb, scales, static_cast<std::size_t>(fp8_scale_count(N, K)) * 4);
}

int64_t native_blocked_find_bad(WeightScheme s, int64_t N, int64_t K, const uint8_t* w, const char** what) {
  const int64_t nblocks = ceil_div(N, kNB), bb = block_bytes(s, K);
  if (is_mx(s)) {
    const int64_t G = K / kG;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t g = 0; g < G; ++g)
        if (w[(n / kNB) * bb + g * kMxChunk + 256 + n % kNB] == kE8m0Nan) {
          *what = "an E8M0 scale of 255 (NaN)";
          return n * G + g;
        }
    return -1;
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k)
      if (e4m3_is_nan(w[(n / kNB) * bb + k * kNB + n % kNB])) {
        *what = "an e4m3 NaN";
        return n * K + k;
      }
  const auto* sc = reinterpret_cast<const float*>(w + nblocks * bb);
  for (int64_t i = 0; i < fp8_scale_count(N, K); ++i) {
    float v;
    std::memcpy(&v, sc + i, 4);
    if (!fp8_scale_ok(v)) {
      *what = "a block scale that is not finite or not below 2^119";
      return i;
    }
  }
  return -1;
}

void native_matmul(WeightScheme s, const float* x, int64_t M, int64_t K, int64_t N, const uint8_t* w, float* y, NativeKernel kernel) {
  if (!is_native_quantized(s) || K % kG != 0) fail(ErrorKind::Internal, "native_matmul: not an mxfp4/fp8-block matrix of whole groups of 32");
  if (kernel == NativeKernel::Auto) kernel = native_kernel_supported(NativeKernel::Avx512) ? NativeKernel::Avx512 : NativeKernel::Portable;
  if (!native_kernel_supported(kernel)) fail(ErrorKind::Internal, "native_matmul: this CPU has no ", native_kernel_name(kernel), " kernel");
  if (M == 0) return;
  const bool avx512 = kernel == NativeKernel::Avx512;
  const int64_t nblocks = ceil_div(N, kNB), bb = block_bytes(s, K);
  const float* fp8_scales = is_mx(s) ? nullptr : reinterpret_cast<const float*>(w + nblocks * bb);
  // Runs of 4 blocks (64 outputs) per iteration, 2 or 1 where there are too few to share.
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t run = nblocks >= 8 * threads ? 4 : nblocks >= 2 * threads ? 2 : 1;
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t ri = 0; ri < ceil_div(nblocks, run); ++ri) {
    const int64_t nb0 = ri * run, blocks = std::min(run, nblocks - nb0);
    alignas(64) float out[kMaxRows * 4 * kNB];
    for (int64_t r0 = 0; r0 < M; r0 += kMaxRows) {
      const int R = static_cast<int>(std::min<int64_t>(kMaxRows, M - r0));
      for (int64_t b0 = 0; b0 < blocks;) {
        const int B = static_cast<int>(std::min<int64_t>(blocks_per_call(R), blocks - b0));
        const int Bk = B == 3 ? 2 : B;  // kernels come in 1, 2 and 4 blocks
        const Pass p{x + r0 * K, K, w + (nb0 + b0) * bb, fp8_scales, nb0 + b0};
        run_blocks(s, p, R, Bk, out, avx512);
        const int64_t n0 = (nb0 + b0) * kNB, width = std::min<int64_t>(Bk * kNB, N - n0);
        for (int r = 0; r < R; ++r) std::memcpy(y + (r0 + r) * N + n0, out + r * Bk * kNB, static_cast<std::size_t>(width) * 4);
        b0 += Bk;
      }
    }
  }
}

}  // namespace moerun

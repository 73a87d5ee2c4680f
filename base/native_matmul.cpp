// Native-format matmul (mxfp4, fp8-block): the blocked form, and the AVX-512 and portable kernels
// over it, which run the same float operations in the same order (see the header).
#include "base/native_matmul.hpp"

#include <omp.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/cpu_features.hpp"
#include "base/dpbusd_avx512.hpp"
#include "base/error.hpp"
#include "base/native_quant.hpp"
#include "base/parallel_for.hpp"
#include "base/weight_dequant.hpp"

// GCC 12 warns that the AVX-512 intrinsics' own _mm512_undefined_* pass-through operands may be
// used uninitialized (they are not: the masks are all ones).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace moerun {
namespace {

constexpr int64_t kNB = 16;  // output rows per block: one float lane each
constexpr int64_t kG = kMxfp4Block;  // mxfp4: k per scale
constexpr int64_t kMxChunk = 256 + 16;  // mxfp4: a (block, group) chunk, values then scales
constexpr int kMaxRows = 4;  // rows of x per pass
constexpr int64_t kDigitRows = 256;  // mxfp4: rows whose activation digits are made at a time
constexpr float kFp8Widen = 256.0f;  // e4m3 bits as fp16 are the value / 256
constexpr int kE2m1Offset = 12;  // mxfp4 weights as unsigned bytes: 2 * e2m1 + 12
// Software prefetch this far ahead in the block's stream: the hardware prefetcher alone keeps too
// few misses in flight (as base/small_m_matmul.cpp measured). 4 KiB rather than 1: fp8 at 1-4 rows
// 0.147 / 0.170 / 0.221 -> 0.133 / 0.153 / 0.194 ms (medians of 8 interleaved bench gemm runs on the
// AMD host; MXFP4 unchanged; 2 KiB in between). Into L2, not L1 (as base/quant_matmul.cpp): MXFP4 at
// one row 0.026 -> 0.023 ms an expert of 384 x 1024, 0.27 -> 0.22 at 2880 x 2880 (Intel AMX host).
constexpr int64_t kPrefetchBytes = 4096;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
bool is_mx(WeightScheme s) {
  return s == WeightScheme::Mxfp4;
}
int64_t block_bytes(WeightScheme s, int64_t K) {
  return is_mx(s) ? (K / kG) * kMxChunk : K * kNB;
}
int64_t fp8_scale_count(int64_t N, int64_t K) {
  return fp8_scale_rows(N) * fp8_scale_cols(K);
}

// mxfp4's weights as the integer kernels take them: 2 * e2m1 + 12 in [0, 24] (an unsigned byte,
// as vpdpbusd's first operand wants), repeated 4 times so that a byte's 6 low bits index it
// (vpermb reads 6 bits; the upper two are the neighbouring nibble's).
struct E2m1Bytes {
  alignas(64) uint8_t v[64];
  int twice[16];  // 2 * e2m1, signed
  E2m1Bytes() {
    for (int i = 0; i < 16; ++i) twice[i] = static_cast<int>(2.0f * dequant::e2m1(static_cast<uint8_t>(i)));
    for (int i = 0; i < 64; ++i) v[i] = static_cast<uint8_t>(twice[i % 16] + kE2m1Offset);
  }
};
const E2m1Bytes kE2M1;

// One row's group of 32 activations as three int8 digits on a power-of-two scale s, written so that
// a 32-bit lane of digits meets the 4 weights vpdpbusd pairs it with: dword 2j holds k = 8j + 0, 2,
// 4, 6 (a stored byte's low nibbles), dword 2j + 1 k = 8j + 1, 3, 5, 7 (the high ones).
//   x ≈ s (d1 + d2 / 2^8 + d3 / 2^15), d1 = round(x / s) in [-127, 127], d2 in [-128, 127],
//   d3 in [0, 127]; |x - that| <= s 2^-15 (24 bits below the group's largest |x|).
// With I_t = Σ 2 e2m1(k) d_t(k) (exact integers), the group's dot product is
//   Σ e2m1 x = s 2^-16 ((I1 << 15) + (I2 << 7) + I3),
// the shifted sum still an int32 (|.| <= 32 * 12 * 127 * 2^15 + ... < 2^31).
struct MxDigits {
  int32_t q[3][8];  // digit t's bytes
  int32_t init[3];  // -12 Σ d_t: the weights' offset, subtracted by starting the sum there
  float scale;  // s 2^-16; NaN when the group holds a NaN or Inf (the outputs become NaN)
};

void mx_digits(const float* x, int64_t K, MxDigits* out) {
  for (int64_t g = 0; g < K / kG; ++g) {
    const float* xg = x + g * kG;
    MxDigits& d = out[g];
    std::memset(&d, 0, sizeof d);
    float amax = 0.0f;
    bool finite = true;
    for (int k = 0; k < kG; ++k) {
      finite = finite && std::isfinite(xg[k]);
      amax = std::max(amax, std::fabs(xg[k]));
    }
    if (!finite) {
      d.scale = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    if (amax == 0.0f) continue;  // scale 0: the group adds nothing
    int e = std::ilogb(amax) - 6;  // amax / 2^e in [64, 128)
    if (std::ldexp(amax, -e) > 127.0f) ++e;
    d.scale = std::ldexp(1.0f, e - 16);
    int8_t digit[3][kG];
    for (int k = 0; k < kG; ++k) {
      const float t = std::ldexp(xg[k], -e);
      const float d1 = std::nearbyint(t);  // |t| <= 127
      float r = (t - d1) * 256.0f;  // exact, in [-128, 128]
      const float d2 = std::min(std::floor(r), 127.0f);
      r = (r - d2) * 128.0f;  // exact, in [0, 128]
      const float d3 = std::min(std::nearbyint(r), 127.0f);
      digit[0][k] = static_cast<int8_t>(d1);
      digit[1][k] = static_cast<int8_t>(d2);
      digit[2][k] = static_cast<int8_t>(d3);
    }
    for (int t = 0; t < 3; ++t) {
      auto* bytes = reinterpret_cast<int8_t*>(d.q[t]);
      int32_t sum = 0;
      for (int k = 0; k < kG; ++k) {
        bytes[4 * (2 * (k / 8) + k % 2) + (k % 8) / 2] = digit[t][k];
        sum += digit[t][k];
      }
      d.init[t] = -kE2m1Offset * sum;
    }
  }
}

// The three digit sums of a group recombined: (I1 << 15) + (I2 << 7) + I3.
inline int32_t mx_group_sum(int32_t i1, int32_t i2, int32_t i3) {
  return i1 * 32768 + i2 * 128 + i3;
}

// The view of one call: x rows, the block's bytes, and the fp8 scale grid.
struct Pass {
  const float* x;  // row r0 of x
  int64_t K;
  const uint8_t* w;  // the block
  const float* fp8_scales;  // the whole grid (fp8), or null
  int64_t nb;  // the block's index (fp8: its scale row)
  const MxDigits* digits;  // mxfp4: row r0's groups (K / 32 per row)
};

float fp8_block_scale(const Pass& p, int64_t kb) {
  return p.fp8_scales[(p.nb * kNB / kFp8Block) * fp8_scale_cols(p.K) + kb];
}

// ---- AVX-512 VNNI + VBMI (mxfp4): R rows x one block of 16 outputs, three int32 sums per output
// and group (one per digit), then one float FMA per group. One block at a time: a single weight
// stream per thread keeps more of the read bandwidth than 2-4 side by side. ----

template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni,avx512vbmi"))) void mx_vnni(const Pass& p, float* out) {
  const int64_t G = p.K / kG;
  const __m512i table = _mm512_load_si512(kE2M1.v);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    const uint8_t* chunk = p.w + g * kMxChunk;
    __m512i sum[R][3];
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < 3; ++t) sum[r][t] = _mm512_set1_epi32(p.digits[r * G + g].init[t]);
    for (int line = 0; line < kMxChunk; line += 64) _mm_prefetch(reinterpret_cast<const char*>(chunk + kPrefetchBytes + line), _MM_HINT_T1);
    for (int j = 0; j < 4; ++j) {  // 8 k per 32-bit lane: byte i of lane n holds k = 8j + 2i, 8j + 2i + 1 of row n
      const __m512i v = _mm512_loadu_si512(chunk + 64 * j);
      const __m512i lo = _mm512_permutexvar_epi8(v, table), hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), table);
      for (int r = 0; r < R; ++r) {
        const MxDigits& d = p.digits[r * G + g];
        for (int t = 0; t < 3; ++t) {
          sum[r][t] = dpbusd_bcast(sum[r][t], lo, &d.q[t][2 * j]);
          sum[r][t] = dpbusd_bcast(sum[r][t], hi, &d.q[t][2 * j + 1]);
        }
      }
    }
    // 2^(s - 127) as float bits s << 23; s = 0 is the subnormal 2^-127.
    const __m512i s = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk + 256)));
    const __m512 wscale = _mm512_castsi512_ps(
        _mm512_mask_mov_epi32(_mm512_slli_epi32(s, 23), _mm512_cmpeq_epi32_mask(s, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000)));
    for (int r = 0; r < R; ++r) {
      const __m512i total =
          _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(sum[r][0], 15), _mm512_slli_epi32(sum[r][1], 7)), sum[r][2]);
      const __m512 f = _mm512_mul_ps(wscale, _mm512_set1_ps(p.digits[r * G + g].scale));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), f, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * kNB, acc[r]);
}

template <int R>
__attribute__((target("avx512f,avx512bw,f16c"))) void fp8_avx512(const Pass& p, float* out) {
  const __m512i keep = _mm512_set1_epi16(static_cast<short>(0xBFFF));
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t k0 = 0, kb = 0; k0 < p.K; k0 += kFp8Block, ++kb) {
    const int64_t k1 = std::min(p.K, k0 + kFp8Block);
    __m512 te[R], to[R];
    for (int r = 0; r < R; ++r) te[r] = to[r] = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int64_t k = k0; k < k1; k += 2) {
      if (k % 4 == 0) _mm_prefetch(reinterpret_cast<const char*>(p.w + k * kNB + kPrefetchBytes), _MM_HINT_T1);
      // Sign-extended, shifted by 7: sign at bit 15, exponent and mantissa in fp16's place, bit 14
      // (a copy of the sign) cleared: the fp16 of e4m3 / 256, subnormals included.
      const __m512i v = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.w + k * kNB)));
      const __m512i h = _mm512_and_si512(_mm512_slli_epi16(v, 7), keep);
      const __m512 we = _mm512_cvtph_ps(_mm512_castsi512_si256(h)), wo = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
      for (int r = 0; r < R; ++r) {
        te[r] = _mm512_fmadd_ps(we, _mm512_set1_ps(p.x[r * p.K + k]), te[r]);
        to[r] = _mm512_fmadd_ps(wo, _mm512_set1_ps(p.x[r * p.K + k + 1]), to[r]);
      }
    }
    const __m512 scale = _mm512_set1_ps(fp8_block_scale(p, kb) * kFp8Widen);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_add_ps(te[r], to[r]), scale, acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * kNB, acc[r]);
}

// ---- Portable: the same operations lane by lane. ----

void portable_block(WeightScheme sch, const Pass& p, int R, float* out) {
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < kNB; ++n) {
      const float* x = p.x + r * p.K;
      const uint8_t* wb = p.w;
      float acc = 0.0f;
      if (is_mx(sch)) {
        const int64_t G = p.K / kG;
        for (int64_t g = 0; g < G; ++g) {
          const MxDigits& d = p.digits[r * G + g];
          int32_t sum[3] = {0, 0, 0};
          for (int pr = 0; pr < 16; ++pr) {  // the stored byte of k = 2pr, 2pr + 1: byte pr % 4 of lane n's dword pr / 4
            const uint8_t v = wb[g * kMxChunk + 64 * (pr / 4) + 4 * n + pr % 4];
            for (int t = 0; t < 3; ++t) {
              const auto* digit = reinterpret_cast<const int8_t*>(d.q[t]);
              sum[t] +=
                  kE2M1.twice[v & 15] * digit[4 * (2 * (pr / 4)) + pr % 4] + kE2M1.twice[v >> 4] * digit[4 * (2 * (pr / 4) + 1) + pr % 4];
            }
          }
          const float f = dequant::e8m0(wb[g * kMxChunk + 256 + n]) * d.scale;
          acc = std::fma(static_cast<float>(mx_group_sum(sum[0], sum[1], sum[2])), f, acc);
        }
      } else {
        for (int64_t k0 = 0, kb = 0; k0 < p.K; k0 += kFp8Block, ++kb) {
          float te = 0.0f, to = 0.0f;
          for (int64_t k = k0; k < std::min(p.K, k0 + kFp8Block); k += 2) {
            te = std::fma(dequant::e4m3(wb[k * kNB + n]) / kFp8Widen, x[k], te);
            to = std::fma(dequant::e4m3(wb[(k + 1) * kNB + n]) / kFp8Widen, x[k + 1], to);
          }
          acc = std::fma(te + to, fp8_block_scale(p, kb) * kFp8Widen, acc);
        }
      }
      out[r * kNB + n] = acc;
    }
}

template <int R>
void avx512_block(WeightScheme s, const Pass& p, float* out) {
  if (is_mx(s)) return mx_vnni<R>(p, out);
  return fp8_avx512<R>(p, out);
}

void run_block(WeightScheme s, const Pass& p, int R, float* out, bool avx512) {
  if (!avx512) return portable_block(s, p, R, out);
  switch (R) {
    case 1: return avx512_block<1>(s, p, out);
    case 2: return avx512_block<2>(s, p, out);
    case 3: return avx512_block<3>(s, p, out);
    default: return avx512_block<4>(s, p, out);
  }
}

}  // namespace

bool native_kernel_supported(WeightScheme s, NativeKernel k) {
  const CpuFeatures& f = cpu_features();
  const bool avx512 = f.avx512f && f.avx512bw && f.f16c;
  const bool vnni = avx512 && f.avx512vnni && f.avx512vbmi;
  return k == NativeKernel::Avx512 ? (is_mx(s) ? vnni : avx512) : true;
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
      *what = "a block scale that is not finite or not below 2^64 (its products overflow float32)";
      return i;
    }
  }
  return -1;
}

void native_matmul(WeightScheme s, const float* x, int64_t M, int64_t K, int64_t N, const uint8_t* w, float* y, NativeKernel kernel) {
  if (!is_native_quantized(s) || K % kG != 0)
    fail(ErrorKind::Internal, "native_matmul: not an mxfp4/fp8-block matrix of whole groups of 32");
  if (kernel == NativeKernel::Auto)
    kernel = native_kernel_supported(s, NativeKernel::Avx512) ? NativeKernel::Avx512 : NativeKernel::Portable;
  if (!native_kernel_supported(s, kernel))
    fail(ErrorKind::Internal, "native_matmul: this CPU has no ", native_kernel_name(kernel), " kernel");
  if (M == 0) return;
  const bool avx512 = kernel == NativeKernel::Avx512;
  const int64_t nblocks = ceil_div(N, kNB), bb = block_bytes(s, K);
  const float* fp8_scales = is_mx(s) ? nullptr : reinterpret_cast<const float*>(w + nblocks * bb);
  // mxfp4: the activations' digits, for up to kDigitRows rows at a time (each thread's buffer,
  // reused across calls: ~3.5 bytes per activation, so a long prefill does not double its memory).
  thread_local std::vector<MxDigits> digits;
  const int64_t chunk = is_mx(s) ? kDigitRows : M;
  for (int64_t c0 = 0; c0 < M; c0 += chunk) {
    const int64_t rows = std::min(chunk, M - c0);
    if (is_mx(s)) {
      digits.resize(static_cast<std::size_t>(rows * (K / kG)));
      MxDigits* dst = digits.data();
      parallel_for(rows, rows >= 16, [&](int64_t m) { mx_digits(x + (c0 + m) * K, K, dst + m * (K / kG)); });
    }
    const MxDigits* dg = digits.data();
    parallel_for(nblocks, true, [&](int64_t nb) {
      const int64_t n0 = nb * kNB, width = std::min<int64_t>(kNB, N - n0);
      alignas(64) float out[kMaxRows * kNB];
      for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
        const int R = static_cast<int>(std::min<int64_t>(kMaxRows, rows - r0));
        const Pass p{x + (c0 + r0) * K, K, w + nb * bb, fp8_scales, nb, is_mx(s) ? dg + r0 * (K / kG) : nullptr};
        run_block(s, p, R, out, avx512);
        for (int r = 0; r < R; ++r) std::memcpy(y + (c0 + r0 + r) * N + n0, out + r * kNB, static_cast<std::size_t>(width) * 4);
      }
    });
  }
}

}  // namespace moerun

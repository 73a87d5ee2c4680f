// Quantized matmul: activation quantization, the blocked weight form, and the VNNI and portable
// kernels over it (same integer sums and the same float operations in the same order).
#include "base/quant_matmul.hpp"

#include <omp.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/dtype.hpp"
#include "base/error.hpp"

namespace moerun {
namespace {

constexpr int64_t kG = kQuantGroup;
constexpr int64_t kNB = 16;  // output rows per block: one 32-bit lane each
constexpr int kRowsPerPass = 4;

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
  for (int64_t g = 0; g < p.G; ++g) {
    __m512i ia[R][B];
    for (int r = 0; r < R; ++r)
      for (int b = 0; b < B; ++b) ia[r][b] = _mm512_setzero_si512();
    for (int j = 0; j < (Q4 ? 4 : 8); ++j) {
      __m512i lo[B], hi[B];
      for (int b = 0; b < B; ++b) {
        const __m512i v = _mm512_loadu_si512(w + b * block_bytes + g * cb + 64 * j);
        lo[b] = Q4 ? _mm512_and_si512(v, low4) : v;
        if constexpr (Q4) hi[b] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
      for (int r = 0; r < R; ++r) {
        const __m512i xl = _mm512_set1_epi32(x_quad(p, r, g, j));
        for (int b = 0; b < B; ++b) ia[r][b] = _mm512_dpbusd_epi32(ia[r][b], lo[b], xl);
        if constexpr (Q4) {
          const __m512i xh = _mm512_set1_epi32(x_quad(p, r, g, j + 4));
          for (int b = 0; b < B; ++b) ia[r][b] = _mm512_dpbusd_epi32(ia[r][b], hi[b], xh);
        }
      }
    }
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
        const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(ia[r][b], off));
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

}  // namespace

bool quant_vnni_supported() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vnni");
  return ok;
}

void quantize_activations(const float* x, int64_t M, int64_t K, QuantizedRows& out) {
  if (K % kG != 0) fail(ErrorKind::Internal, "quantize_activations: ", K, " columns are not a multiple of ", kG);
  const int64_t G = K / kG;
  out.rows = M;
  out.cols = K;
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

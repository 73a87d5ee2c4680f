// The CUDA backend's kernels (see cuda_kernels.cuh). Grid-stride loops: any n fits any grid.
#include "experts/cuda/cuda_kernels.cuh"

#include <algorithm>

#include "base/cuda_check.hpp"

namespace moerun::experts::kernels {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, 65535));
}

__device__ uint16_t round_to_bf16(float f) {
  uint32_t bits = __float_as_uint(f);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return 0x7fc0;  // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

__global__ void f32_to_bf16_kernel(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = round_to_bf16(in[i]);
}

__global__ void bf16_to_f32_kernel(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __uint_as_float(static_cast<uint32_t>(in[i]) << 16);
}

__global__ void silu_mul_kernel(const float* g, const float* u, void* act, bool bf16_out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const float x = g[i];
    const float a = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf(-x))), u[i]);
    if (bf16_out)
      static_cast<uint16_t*>(act)[i] = round_to_bf16(a);
    else
      static_cast<float*>(act)[i] = a;
  }
}

__global__ void dequantize_kernel(dequant::QuantMatrix w, float* out) {
  const int64_t n = w.rows * w.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = dequant::weight(w, i / w.cols, i % w.cols);
}

__device__ float bias_at(const void* b, bool bf16, int64_t i) {
  return bf16 ? __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(b)[i]) << 16) : static_cast<const float*>(b)[i];
}

// The CPU's expression order, with _rn operations (no contraction into FMAs).
__global__ void gated_activation_kernel(const float* g, const float* u, GatedActivation a, void* act, bool bf16_out, int64_t rows,
                                        int64_t ff) {
  const int64_t n = rows * ff;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    float gv = g[i], uv = u[i];
    if (a.b1) {
      gv = __fadd_rn(gv, bias_at(a.b1, a.bias_bf16, i % ff));
      uv = __fadd_rn(uv, bias_at(a.b3, a.bias_bf16, i % ff));
    }
    float out;
    if (a.clamped) {
      gv = fminf(gv, a.limit);
      uv = fminf(fmaxf(uv, -a.limit), a.limit);
      out = __fmul_rn(__fadd_rn(uv, 1.0f), __fdiv_rn(gv, __fadd_rn(1.0f, expf(__fmul_rn(-a.alpha, gv)))));
    } else {
      out = __fmul_rn(__fdiv_rn(gv, __fadd_rn(1.0f, expf(-gv))), uv);
    }
    if (bf16_out)
      static_cast<uint16_t*>(act)[i] = round_to_bf16(out);
    else
      static_cast<float*>(act)[i] = out;
  }
}

__global__ void add_row_bias_kernel(float* y, const void* b, bool bf16, int64_t rows, int64_t d) {
  const int64_t n = rows * d;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    y[i] = __fadd_rn(y[i], bias_at(b, bf16, i % d));
}

__global__ void permute_rows_kernel(const float* x, const int32_t* row_token, int64_t rows, int64_t d, float* out) {
  const int64_t n = rows * d;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / d, c = i % d;
    out[i] = x[int64_t{row_token[r]} * d + c];
  }
}

// Explicit _rn operations: no fused multiply-add, so the sum is the CPU's, bit for bit.
__global__ void combine_rows_kernel(const float* y, const int64_t* slot_row, const float* weight, int64_t tokens, int64_t k, int64_t d,
                                    float* out) {
  const int64_t n = tokens * d;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / d, c = i % d;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t r = slot_row[t * k + j];
      if (r < 0) continue;
      acc = __fadd_rn(acc, __fmul_rn(weight[t * k + j], y[r * d + c]));
    }
    out[i] = acc;
  }
}

}  // namespace

void f32_to_bf16(const float* in, uint16_t* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  f32_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n);
  CUDA_CHECK(cudaGetLastError());
}

void bf16_to_f32(const uint16_t* in, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  bf16_to_f32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, out, n);
  CUDA_CHECK(cudaGetLastError());
}

void silu_mul(const float* g, const float* u, void* act, bool bf16_out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  silu_mul_kernel<<<blocks_for(n), kThreads, 0, stream>>>(g, u, act, bf16_out, n);
  CUDA_CHECK(cudaGetLastError());
}

void gated_activation(const float* g, const float* u, const GatedActivation& a, void* act, bool bf16_out, int64_t rows, int64_t ff,
                      cudaStream_t stream) {
  if (rows * ff <= 0) return;
  gated_activation_kernel<<<blocks_for(rows * ff), kThreads, 0, stream>>>(g, u, a, act, bf16_out, rows, ff);
  CUDA_CHECK(cudaGetLastError());
}

void add_row_bias(float* y, const void* b, bool bias_bf16, int64_t rows, int64_t d, cudaStream_t stream) {
  if (rows * d <= 0) return;
  add_row_bias_kernel<<<blocks_for(rows * d), kThreads, 0, stream>>>(y, b, bias_bf16, rows, d);
  CUDA_CHECK(cudaGetLastError());
}

void permute_rows(const float* x, const int32_t* row_token, int64_t rows, int64_t d, float* out, cudaStream_t stream) {
  if (rows * d <= 0) return;
  permute_rows_kernel<<<blocks_for(rows * d), kThreads, 0, stream>>>(x, row_token, rows, d, out);
  CUDA_CHECK(cudaGetLastError());
}

void combine_rows(const float* results, const int64_t* slot_row, const float* weight, int64_t tokens, int64_t top_k, int64_t d, float* out,
                  cudaStream_t stream) {
  if (tokens * d <= 0) return;
  combine_rows_kernel<<<blocks_for(tokens * d), kThreads, 0, stream>>>(results, slot_row, weight, tokens, top_k, d, out);
  CUDA_CHECK(cudaGetLastError());
}

void dequantize(const dequant::QuantMatrix& w, float* out, cudaStream_t stream) {
  dequantize_kernel<<<blocks_for(w.rows * w.cols), kThreads, 0, stream>>>(w, out);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace moerun::experts::kernels

// Matmul: the CPU GEMM every layer uses, on oneDNN. Weights follow the PyTorch Linear convention
// W[out, in] row-major and y = x·Wᵀ; float32 weights run fp32 GEMMs, bfloat16 weights run bf16×bf16
// GEMMs with fp32 accumulation and fp32 output (AMX/AVX512-BF16 where the CPU has them).
// Primitives are created once per shape and cached; oneDNN errors become moerun::Error.
#pragma once
#include <cstdint>
#include <memory>

#include "base/aligned_buffer.hpp"
#include "base/dtype.hpp"

namespace moerun {

// A weight matrix [rows=out, cols=in] in its stored dtype (float32, or bfloat16 bits).
struct WeightMatrix {
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  AlignedBuffer data;

  std::size_t bytes() const { return static_cast<std::size_t>(rows * cols) * dtype_size(dtype); }
  void allocate(DType t, int64_t r, int64_t c) {
    dtype = t;
    rows = r;
    cols = c;
    data.resize(bytes());
  }
};

class Matmul {
 public:
  Matmul();
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // y[M, W.rows] = x[M, W.cols] · Wᵀ. x is float32; for bf16 weights it is rounded to bf16 first.
  void linear(const float* x, int64_t M, const WeightMatrix& W, float* y);
  // Same with activations already in bf16 (W must be bf16).
  void linear_bf16(const uint16_t* x, int64_t M, const WeightMatrix& W, float* y);

  // Name of the ISA oneDNN dispatches to (for bench output).
  static const char* isa_name();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moerun

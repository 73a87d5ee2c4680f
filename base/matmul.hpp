// Matmul: the CPU GEMM every layer uses, on oneDNN. Weights follow the PyTorch Linear convention
// W[out, in] row-major and y = x·Wᵀ; float32 weights run fp32 GEMMs, bfloat16 weights run bf16×bf16
// GEMMs with fp32 accumulation and fp32 output (AMX/AVX512-BF16 where the CPU has them).
// Primitives are created once per shape and cached; oneDNN errors become moerun::Error.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "base/aligned_buffer.hpp"
#include "base/dtype.hpp"
#include "base/quant_format.hpp"

namespace moerun {

// Opaque oneDNN blocked layout a weight matrix may be packed into (see Matmul::pack).
struct PackedLayout;

// A weight matrix [rows=out, cols=in] in its stored dtype (float32, or bfloat16 bits). Plain
// row-major unless `packed` is set, in which case `data` holds oneDNN's preferred blocked layout.
// A q8/q4 `scheme` means `data` holds base/quant_matmul's blocked form instead (computed with
// quant_matmul, never by oneDNN; `dtype` is then the dense dtype it stands in for).
struct WeightMatrix {
  DType dtype = DType::F32;
  WeightScheme scheme = WeightScheme::Plain;
  int64_t rows = 0;
  int64_t cols = 0;
  AlignedBuffer data;
  std::shared_ptr<const PackedLayout> packed;

  std::size_t bytes() const { return static_cast<std::size_t>(rows * cols) * dtype_size(dtype); }  // plain only
  void allocate(DType t, int64_t r, int64_t c) {
    dtype = t;
    rows = r;
    cols = c;
    data.resize(bytes());
  }
};

// A SwiGLU FFN's three matrices in host memory: w1, w3 [ff, d], w2 [d, ff] (an expert in the CPU
// backend's form, or a model's dense shared expert), and its biases b1‖b3‖b2 in float32 where the
// model has them (gpt-oss), else empty.
struct FfnWeights {
  WeightMatrix w1, w3, w2;
  AlignedBuffer bias;
  const float* b1() const { return bias.as<float>(); }
  const float* b3() const { return bias.as<float>() + w1.rows; }
  const float* b2() const { return bias.as<float>() + 2 * w1.rows; }
};

// What is applied to the GEMM result before it is stored (fused into the oneDNN primitive).
enum class Epilogue {
  None,
  Silu,  // y = silu(x·Wᵀ)
  MulBy,  // y = (x·Wᵀ) ⊙ other, other [M, N] float32
};

class Matmul {
 public:
  // hand_kernels = false: every GEMM in oneDNN, never in base/small_m_matmul's kernels (the
  // baseline of `moerun bench gemm`).
  explicit Matmul(bool hand_kernels = true);
  bool hand_kernels() const;
  ~Matmul();
  Matmul(const Matmul&) = delete;
  Matmul& operator=(const Matmul&) = delete;

  // y[M, W.rows] = x[M, W.cols] · Wᵀ over every weight format: x is float32; for bf16 weights it is
  // rounded to bf16 first, for q8/q4 weights quantized per row and group of 32 (base/quant_matmul);
  // mxfp4 and fp8-block (as shipped, in native_matmul's blocked form) take it in float32.
  void linear(const float* x, int64_t M, const WeightMatrix& W, float* y);

  // The general form. x is in W's dtype (float32, or bf16 bits for bf16 weights); y is float32 or
  // bf16 (`y_dtype`); `other` is the MulBy operand. If x, y and other all have room for at least
  // padded_rows(M) rows (`rows_capacity`), padding rows are computed in place (garbage) instead of
  // through scratch copies.
  void gemm(const void* x, int64_t M, const WeightMatrix& W, void* y, DType y_dtype, Epilogue ep = Epilogue::None,
            const float* other = nullptr, int64_t rows_capacity = 0);

  // oneDNN 2.6's AMX bf16 matmul picks a poor M blocking (4-6x slower) when M/16 has a large prime
  // factor (M = 53, 106, 244, 464, 848... measured with bench layer). bf16 GEMMs therefore run in
  // chunks of at most 512 rows, each padded to a multiple of 16 (<= 256 rows) or 32 (<= 512).
  static int64_t padded_rows(int64_t M);
  // The rows of one bf16 chunk: a GEMM on M rows is the same calls as on its 512-row chunks and
  // remainder separately, so rows split at multiples of it give the same bits (replicas, issue 27).
  static constexpr int64_t kRowChunk = 512;

  // Replaces a plain row-major W (float32 or bf16, columns a multiple of 32) by its q8/q4
  // quantization (base/quant_format) in quant_matmul's blocked form; linear() then runs quant_matmul.
  void quantize(WeightMatrix& W, WeightScheme s);
  // Reorders W in place into the blocked layout oneDNN prefers for GEMMs of about `typical_rows`
  // rows (for bf16 on AMX this avoids re-blocking the weights on every call). Call after the
  // checksum was verified; a no-op if the preferred layout is the plain one.
  void pack(WeightMatrix& W, int64_t typical_rows);
  // The same from plain row-major [rows, cols] bytes of dtype `t` straight into W, reusing W's
  // buffer when it is big enough (the expert cache packs every load into a preallocated slot).
  void pack_from(const void* plain, DType t, int64_t rows, int64_t cols, WeightMatrix& W, int64_t typical_rows);
  // Bytes such a packed matrix takes (at least its plain size).
  std::size_t packed_bytes(DType t, int64_t rows, int64_t cols, int64_t typical_rows);
  // Makes W such a packed matrix without filling it: shape, layout and a buffer of the packed size
  // (for bytes that were packed before, e.g. read back from the L2 cache).
  void shape_packed(WeightMatrix& W, DType t, int64_t rows, int64_t cols, int64_t typical_rows);
  // A name for the packed layout that changes whenever its bytes could (library version, ISA,
  // dtype, shape, size): what a stored packed matrix must match to be read back.
  std::string packed_layout_name(DType t, int64_t rows, int64_t cols, int64_t typical_rows);

  // Whether GEMMs on W can run in the hand-written kernels (base/small_m_matmul.hpp): W packed in
  // a layout they read (pack() picks one wherever rows_independent) and this CPU's ISA.
  static bool uses_hand_kernels(const WeightMatrix& W);
  // Whether every GEMM on such a matrix of dtype `t` (float32 or bf16) does, at every M: then each
  // row is computed in one summation order, and its bits do not depend on M or on the other rows
  // (batch invariance, issue 44). True with AVX-512F (float32) or AVX512_BF16 (bf16); on CPUs with
  // AMX every bf16 GEMM runs in the panel's AMX tiles (base/amx_bf16_panel.hpp), decode's too.
  static bool rows_independent(DType t);
  // The streaming small-M kernels (M <= small_m_max_rows(), kSmallM on large matrices) ...
  static bool uses_small_m(const WeightMatrix& W, int64_t M);
  // ... and the panel kernel (every other M, where rows_independent).
  static bool uses_panel(const WeightMatrix& W, int64_t M);

  // Whether bf16 weights are held widened to float32 and run float32 GEMMs (on the bf16-rounded x):
  // where oneDNN has no bf16 matmul (below AVX-512, e.g. AVX2 CPUs). Their memory is then twice the
  // bf16 size (packed_bytes counts it), and their GEMMs run whole, not in kRowChunk chunks.
  static bool bf16_widened();

  // Name of the ISA oneDNN dispatches to (for bench output).
  static const char* isa_name();

 private:
  // The packed layout for such a matrix; null when oneDNN prefers the plain one.
  std::shared_ptr<const PackedLayout> layout_for(DType t, int64_t rows, int64_t cols, int64_t typical_rows);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moerun

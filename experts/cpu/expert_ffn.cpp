// CPU expert FFN.
#include "experts/cpu/expert_ffn.hpp"

#include <cstring>

namespace moerun::experts {

void expert_ffn_forward(Matmul& mm, const float* x, int64_t rows, const FfnWeights& w, float* y,
                        ExpertScratch& s) {
  if (rows == 0) return;
  const int64_t d = w.w2.rows, ff = w.w2.cols;
  const DType dt = w.w2.dtype;
  // Scratch is sized for the padded row count so bf16 GEMMs compute padding rows in place.
  const int64_t cap = Matmul::padded_rows(rows);
  const void* xin = x;
  if (dt == DType::BF16) {
    s.x.resize(static_cast<std::size_t>(cap * d) * 2);
    f32_to_bf16(x, s.x.as<uint16_t>(), static_cast<std::size_t>(rows * d));
    std::memset(s.x.as<uint16_t>() + rows * d, 0, static_cast<std::size_t>((cap - rows) * d) * 2);
    xin = s.x.data();
  }
  s.g.resize(static_cast<std::size_t>(cap * ff) * 4);
  s.act.resize(static_cast<std::size_t>(cap * ff) * dtype_size(dt));
  mm.gemm(xin, rows, w.w1, s.g.data(), DType::F32, Epilogue::Silu, nullptr, cap);
  mm.gemm(xin, rows, w.w3, s.act.data(), dt, Epilogue::MulBy, s.g.as<float>(), cap);
  mm.gemm(s.act.data(), rows, w.w2, y, DType::F32);
}

}  // namespace moerun::experts

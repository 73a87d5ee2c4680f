// CPU expert FFN.
#include "experts/cpu/expert_ffn.hpp"

#include <cmath>

namespace moerun::experts {

void swiglu(const float* h, int64_t rows, int64_t ff, float* act) {
#pragma omp parallel for schedule(static) if (rows * ff > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = h + r * 2 * ff;
    const float* u = g + ff;
    float* a = act + r * ff;
    for (int64_t i = 0; i < ff; ++i) a[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void swiglu_bf16(const float* h, int64_t rows, int64_t ff, uint16_t* act) {
#pragma omp parallel for schedule(static) if (rows * ff > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = h + r * 2 * ff;
    const float* u = g + ff;
    uint16_t* a = act + r * ff;
    for (int64_t i = 0; i < ff; ++i) a[i] = f32_to_bf16(g[i] / (1.0f + std::exp(-g[i])) * u[i]);
  }
}

void expert_ffn_forward(Matmul& mm, const float* x, int64_t rows, const io::ExpertWeights& w, float* y,
                        ExpertScratch& s) {
  if (rows == 0) return;
  const int64_t ff = w.w2.cols;
  s.h.resize(static_cast<std::size_t>(rows * 2 * ff) * sizeof(float));
  mm.linear(x, rows, w.w13, s.h.as<float>());
  if (w.w2.dtype == DType::BF16) {
    s.act.resize(static_cast<std::size_t>(rows * ff) * sizeof(uint16_t));
    swiglu_bf16(s.h.as<float>(), rows, ff, s.act.as<uint16_t>());
    mm.linear_bf16(s.act.as<uint16_t>(), rows, w.w2, y);
  } else {
    s.act.resize(static_cast<std::size_t>(rows * ff) * sizeof(float));
    swiglu(s.h.as<float>(), rows, ff, s.act.as<float>());
    mm.linear(s.act.as<float>(), rows, w.w2, y);
  }
}

}  // namespace moerun::experts

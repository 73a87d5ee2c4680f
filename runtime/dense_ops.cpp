// Dense op kernels.
#include "runtime/dense_ops.hpp"

#include <cmath>
#include <cstring>
#include <vector>

namespace moerun::runtime {

void embed_tokens(const float* table, const int32_t* ids, int64_t T, int64_t d, float* out) {
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(out + t * d, table + static_cast<int64_t>(ids[t]) * d, static_cast<std::size_t>(d) * sizeof(float));
}

void rms_norm(const float* x, int64_t T, int64_t d, const float* w, float eps, float* out) {
#pragma omp parallel for schedule(static) if (T * d > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* r = x + t * d;
    float ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += r[i] * r[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
    float* o = out + t * d;
    for (int64_t i = 0; i < d; ++i) o[i] = w[i] * (r[i] * inv);
  }
}

void rope_apply(float* x, int64_t T, int64_t heads, int64_t hd, const int32_t* positions, double theta) {
  const int64_t half = hd / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0f / std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(hd));
  std::vector<float> cs(static_cast<std::size_t>(half)), sn(static_cast<std::size_t>(half));
  for (int64_t t = 0; t < T; ++t) {
    const float p = static_cast<float>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float a = p * inv_freq[i];
      cs[i] = std::cos(a);
      sn[i] = std::sin(a);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

void add_inplace(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_row_bias(float* y, int64_t T, int64_t n, const float* b) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n; ++i) y[t * n + i] += b[i];
}

void add_sigmoid_gated(float* y, const float* s, const float* x, const float* g, int64_t T, int64_t d) {
  for (int64_t t = 0; t < T; ++t) {
    float dot = 0;
    for (int64_t i = 0; i < d; ++i) dot += x[t * d + i] * g[i];
    const float gate = 1.0f / (1.0f + std::exp(-dot));
    for (int64_t i = 0; i < d; ++i) y[t * d + i] += gate * s[t * d + i];
  }
}

}  // namespace moerun::runtime

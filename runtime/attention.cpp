// Attention kernel and KV cache.
#include "runtime/attention.hpp"

#include <algorithm>
#include <cmath>

namespace moerun::runtime {

void KvCache::init(int64_t layers, int64_t kvd, int64_t reserve) {
  kv_dim = kvd;
  k.assign(static_cast<std::size_t>(layers), {});
  v.assign(static_cast<std::size_t>(layers), {});
  for (int64_t l = 0; l < layers; ++l) {
    k[l].reserve(static_cast<std::size_t>(reserve * kvd));
    v[l].reserve(static_cast<std::size_t>(reserve * kvd));
  }
}

void KvCache::append(int64_t layer, const float* kr, const float* vr, int64_t n) {
  k[layer].insert(k[layer].end(), kr, kr + n * kv_dim);
  v[layer].insert(v[layer].end(), vr, vr + n * kv_dim);
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (std::size_t l = 0; l < k.size(); ++l) b += static_cast<int64_t>((k[l].capacity() + v[l].capacity()) * sizeof(float));
  return b;
}

void attention_forward(const float* q, const float* kc, const float* vc, int64_t pos0, int64_t n, int64_t H,
                       int64_t KV, int64_t hd, float* out) {
  const int64_t group = H / KV;
  const int64_t kvd = KV * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for collapse(2) schedule(dynamic) if (n * H > 8)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t len = pos0 + i + 1;
      const int64_t g = h / group;
      const float* qv = q + i * H * hd + h * hd;
      std::vector<float> s(static_cast<std::size_t>(len));
      float mx = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        const float* kv = kc + j * kvd + g * hd;
        float dot = 0;
        for (int64_t c = 0; c < hd; ++c) dot += qv[c] * kv[c];
        s[j] = dot * scale;
        mx = std::max(mx, s[j]);
      }
      float sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        s[j] = std::exp(s[j] - mx);
        sum += s[j];
      }
      float* o = out + i * H * hd + h * hd;
      std::fill(o, o + hd, 0.0f);
      for (int64_t j = 0; j < len; ++j) {
        const float w = s[j] / sum;
        const float* vv = vc + j * kvd + g * hd;
        for (int64_t c = 0; c < hd; ++c) o[c] += w * vv[c];
      }
    }
  }
}

}  // namespace moerun::runtime

// Attention kernel and KV cache.
#include "runtime/attention.hpp"

#include <algorithm>
#include <cmath>

namespace moerun::runtime {

void KvCache::init(int64_t layers, int64_t kd, int64_t vd, int64_t reserve, const std::vector<int64_t>& windows) {
  k_dim = kd;
  v_dim = vd;
  start.assign(static_cast<std::size_t>(layers), 0);
  window = windows.empty() ? std::vector<int64_t>(static_cast<std::size_t>(layers), 0) : windows;
  k.assign(static_cast<std::size_t>(layers), {});
  v.assign(static_cast<std::size_t>(layers), {});
  for (int64_t l = 0; l < layers; ++l) reserve_rows(l, reserve);
}

void KvCache::reserve_rows(int64_t l, int64_t positions) {
  const int64_t rows = window[l] > 0 ? std::min(positions, 2 * window[l]) : positions;
  k[l].reserve(static_cast<std::size_t>(rows * k_dim));
  v[l].reserve(static_cast<std::size_t>(rows * v_dim));
}

void KvCache::trim_windows() {
  for (std::size_t l = 0; l < k.size(); ++l)
    if (window[l] > 0 && rows(static_cast<int64_t>(l)) >= 2 * window[l]) trim(static_cast<int64_t>(l), window[l] - 1);
}

void KvCache::append(int64_t layer, const float* kr, const float* vr, int64_t n) {
  k[layer].insert(k[layer].end(), kr, kr + n * k_dim);
  if (v_dim > 0) v[layer].insert(v[layer].end(), vr, vr + n * v_dim);
}

void KvCache::trim(int64_t layer, int64_t keep) {
  const int64_t drop = rows(layer) - keep;
  if (drop <= 0) return;
  k[layer].erase(k[layer].begin(), k[layer].begin() + drop * k_dim);
  v[layer].erase(v[layer].begin(), v[layer].begin() + drop * v_dim);
  start[layer] += drop;
}

void KvCache::init(const model::ModelConfig& c, int64_t reserve) {
  std::vector<int64_t> windows;
  for (int64_t l = 0; l < c.num_layers; ++l) windows.push_back(c.window_of(l));
  if (c.num_linear_layers() == 0) return init(c.num_layers, c.kv_k_dim(), c.kv_v_dim(), reserve, windows);
  init(c.num_layers, c.kv_k_dim(), c.kv_v_dim(), 0, windows);
  linear.assign(static_cast<std::size_t>(c.num_layers), {});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.is_linear_layer(l)) linear[l].reset(c.linear);
    else reserve_rows(l, reserve);
  }
}

int64_t KvCache::bytes() const {
  int64_t b = 0;
  for (std::size_t l = 0; l < k.size(); ++l) b += static_cast<int64_t>((k[l].capacity() + v[l].capacity()) * sizeof(float));
  for (const DeltaNetState& s : linear) b += static_cast<int64_t>((s.conv.capacity() + s.recurrent.capacity()) * sizeof(float));
  return b;
}

bool KvCache::keeps_rows(std::size_t l) const { return linear.empty() || linear[l].recurrent.empty(); }

bool KvCache::holds_from(int64_t s) const {
  for (std::size_t l = 0; l < k.size(); ++l)
    if (keeps_rows(l) && start[l] > s) return false;
  return true;
}

StateBlock KvCache::copy_block(int64_t s, int64_t n) const {
  StateBlock b;
  b.k.resize(k.size());
  b.v.resize(v.size());
  for (std::size_t l = 0; l < k.size(); ++l) {
    if (!keeps_rows(l)) continue;
    const int64_t row0 = s - start[l];
    b.k[l].assign(k[l].begin() + row0 * k_dim, k[l].begin() + (row0 + n) * k_dim);
    b.v[l].assign(v[l].begin() + row0 * v_dim, v[l].begin() + (row0 + n) * v_dim);
  }
  return b;
}

StateBlock KvCache::snapshot() const {
  StateBlock b;
  b.after = linear;
  return b;
}

void KvCache::append_block(const StateBlock& b, int64_t n) {
  for (std::size_t l = 0; l < k.size(); ++l)
    if (keeps_rows(l)) append(static_cast<int64_t>(l), b.k[l].data(), b.v[l].data(), n);
  if (!b.after.empty()) linear = b.after;
}

int64_t StateBlock::bytes() const {
  int64_t n = 0;
  for (std::size_t l = 0; l < k.size(); ++l) n += static_cast<int64_t>((k[l].size() + v[l].size()) * sizeof(float));
  for (const DeltaNetState& s : after) n += static_cast<int64_t>((s.conv.size() + s.recurrent.size()) * sizeof(float));
  return n;
}

namespace {
// The two inner loops, built for the machine's vector ISA (the rest of the build targets baseline
// x86-64): a decode step's attention is one query against the whole context.
__attribute__((target_clones("avx512f", "avx2", "default"))) float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < n; ++c) s += a[c] * b[c];
  return s;
}
__attribute__((target_clones("avx512f", "avx2", "default"))) void axpy(float w, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) y[c] += w * x[c];
}
}  // namespace

void attention_forward(const float* q, const float* kc, const float* vc, int64_t kv_start, int64_t pos0, int64_t n,
                       const AttentionShape& a, float* out) {
  const int64_t H = a.heads, hd = a.head_dim, vd = a.v_dim > 0 ? a.v_dim : hd;
  const int64_t group = H / a.kv_heads;
  const int64_t ks = a.k_stride > 0 ? a.k_stride : a.kv_heads * hd, vs = a.v_stride > 0 ? a.v_stride : a.kv_heads * vd;
  // The heads that share a kv head go through its rows together, up to kHeadsTogether at a time:
  // each key and value row is read once for all of them (grouped-query attention, and MLA's
  // absorbed form, where every head shares one), not once per head. Each head's sums run in
  // position order as they would alone, so the grouping does not change a bit.
  constexpr int64_t kHeadsTogether = 8;
  const int64_t per_task = std::min(group, kHeadsTogether), tasks_per_group = (group + per_task - 1) / per_task;
  const int64_t tasks = n * a.kv_heads * tasks_per_group;
  // In parallel as soon as there is work for more than one thread: at decode (n = 1) the context
  // and the heads make the work, not the query count.
#pragma omp parallel for schedule(dynamic) if (tasks > 1 && n * H * (pos0 + n - kv_start) * hd > 32768)
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t i = task / (a.kv_heads * tasks_per_group), g = task / tasks_per_group % a.kv_heads;
    const int64_t h0 = g * group + task % tasks_per_group * per_task, h1 = std::min(h0 + per_task, (g + 1) * group);
    const int64_t pos = pos0 + i;
    const int64_t first = a.window > 0 ? std::max<int64_t>(0, pos - a.window + 1) : 0;
    const int64_t len = pos - first + 1;
    const float* kr = kc + (first - kv_start) * ks + g * hd;
    const float* vr = vc + (first - kv_start) * vs + g * vd;
    std::vector<float> s(static_cast<std::size_t>((h1 - h0) * len));
    for (int64_t j = 0; j < len; ++j)
      for (int64_t h = h0; h < h1; ++h) s[(h - h0) * len + j] = dot(q + i * H * hd + h * hd, kr + j * ks, hd) * a.scale;
    for (int64_t h = h0; h < h1; ++h) {
      float* sh = s.data() + (h - h0) * len;
      // A sink joins the max and the sum like one more key, and has no value row.
      float mx = a.sinks ? a.sinks[h] : -INFINITY;
      for (int64_t j = 0; j < len; ++j) mx = std::max(mx, sh[j]);
      float sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        sh[j] = std::exp(sh[j] - mx);
        sum += sh[j];
      }
      if (a.sinks) sum += std::exp(a.sinks[h] - mx);
      for (int64_t j = 0; j < len; ++j) sh[j] /= sum;
      float* o = out + i * H * vd + h * vd;
      std::fill(o, o + vd, 0.0f);
    }
    for (int64_t j = 0; j < len; ++j)
      for (int64_t h = h0; h < h1; ++h) axpy(s[(h - h0) * len + j], vr + j * vs, out + i * H * vd + h * vd, vd);
  }
}

}  // namespace moerun::runtime

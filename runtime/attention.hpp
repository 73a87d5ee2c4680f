// Causal grouped-query attention over a per-sequence KV cache. Prefill of n tokens and n decode
// steps run the same code: queries at positions pos0..pos0+n-1 attend to cache rows 0..pos.
#pragma once
#include <cstdint>
#include <vector>

namespace moerun::runtime {

// K and V of every layer of one sequence, [positions, kv_heads * head_dim] each, fp32.
struct KvCache {
  int64_t kv_dim = 0;
  std::vector<std::vector<float>> k, v;  // [layer]

  void init(int64_t layers, int64_t kv_dim_, int64_t reserve_positions);
  int64_t length(int64_t layer) const { return static_cast<int64_t>(k[layer].size()) / kv_dim; }
  void append(int64_t layer, const float* k_rows, const float* v_rows, int64_t n);
  int64_t bytes() const;
};

// q: [n, H*hd] (RoPE applied); kc, vc: [len >= pos0+n, KV*hd]; out: [n, H*hd]. Softmax in fp32,
// scale 1/sqrt(hd); head h reads kv head h / (H/KV).
void attention_forward(const float* q, const float* kc, const float* vc, int64_t pos0, int64_t n, int64_t H,
                       int64_t KV, int64_t hd, float* out);

}  // namespace moerun::runtime

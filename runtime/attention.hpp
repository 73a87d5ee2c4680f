// Causal grouped-query attention over a per-sequence KV cache. Prefill of n tokens and n decode
// steps run the same code: queries at positions pos0..pos0+n-1 attend to the cached positions at
// and before them, all of them (full) or the last W (a sliding layer), with an optional per-head
// sink logit that joins each softmax and is dropped after it (gpt-oss).
#pragma once
#include <cstdint>
#include <vector>

#include "model/model_config.hpp"
#include "runtime/layer_state.hpp"  // the rows attention reads (KvCache)

namespace moerun::runtime {

struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0;  // on q·k (1/sqrt(head_dim))
  int64_t window = 0;  // 0: every earlier position; W: positions p-W+1 .. p
  const float* sinks = nullptr;  // [heads] or null
  // Values of another width than the keys, and rows of another stride than kv_heads times the
  // width (0: the defaults). MLA expanded: v_dim = v_head_dim; MLA absorbed: one kv head whose
  // value is the first kv_lora_rank of its key row (v_dim kv_lora_rank, v_stride the key row's).
  int64_t v_dim = 0, k_stride = 0, v_stride = 0;
};

// q: [n, H*hd] (RoPE applied); kc, vc: rows for positions kv_start .. pos0+n-1, [rows, k_stride]
// and [rows, v_stride]; out: [n, H*v_dim]. Softmax in fp32; head h reads kv head h / (H/KV). The
// rows a query needs must be there: kv_start <= max(0, pos0 - window + 1) for a window, kv_start
// = 0 without one.
void attention_forward(const float* q, const float* kc, const float* vc, int64_t kv_start, int64_t pos0, int64_t n,
                       const AttentionShape& shape, float* out);

}  // namespace moerun::runtime

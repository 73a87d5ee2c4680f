// Causal grouped-query attention over a per-sequence KV cache. Prefill of n tokens and n decode
// steps run the same code: queries at positions pos0..pos0+n-1 attend to the cached positions at
// and before them, all of them (full) or the last W (a sliding layer), with an optional per-head
// sink logit that joins each softmax and is dropped after it (gpt-oss).
#pragma once
#include <cstdint>
#include <vector>

#include "model/model_config.hpp"
#include "runtime/blocks/gated_deltanet.hpp"

namespace moerun::runtime {

// Every layer's state of one sequence. Attention layers: K and V, [positions, k_dim] and [positions,
// v_dim], fp32: k_dim = v_dim = kv_heads * head_dim for grouped-query attention; for MLA one row of
// k_dim = kv_lora_rank + qk_rope_head_dim (the latent and the RoPE key) and no V (v_dim 0). A sliding
// layer drops the positions no later query can see (trim_windows), so its rows start at
// start[layer]. Linear-attention layers (Gated DeltaNet): no rows, a recurrent state.
// Positions [start, start + n) of a sequence's state as the prefix cache keeps them: each row-keeping
// layer's rows, and the recurrent layers' state after the block where one was taken (empty: none).
struct StateBlock {
  std::vector<std::vector<float>> k, v;  // [layer]; empty for a layer without rows
  std::vector<DeltaNetState> after;      // [layer]
  int64_t bytes() const;
};

struct KvCache {
  int64_t k_dim = 0, v_dim = 0;
  std::vector<std::vector<float>> k, v;  // [layer]
  std::vector<int64_t> start;            // [layer]: position of row 0
  std::vector<int64_t> window;           // [layer]: W of a sliding layer, 0 for full attention
  std::vector<DeltaNetState> linear;     // [layer]: a linear-attention layer's state, empty elsewhere

  // `windows`: per layer (empty: all full).
  void init(int64_t layers, int64_t k_dim_, int64_t v_dim_, int64_t reserve_positions, const std::vector<int64_t>& windows = {});
  int64_t rows(int64_t layer) const { return static_cast<int64_t>(k[layer].size()) / k_dim; }
  // Positions covered: start + rows.
  int64_t length(int64_t layer) const { return start[layer] + rows(layer); }
  void append(int64_t layer, const float* k_rows, const float* v_rows, int64_t n);  // v_rows unused when v_dim is 0
  // Keeps the last `keep` positions of `layer` (no-op when it holds fewer).
  void trim(int64_t layer, int64_t keep);
  // Sliding layers that hold 2W rows or more keep their last W - 1 (all a later query can see):
  // amortised, a row is moved at most once, and a layer never holds more than 2W rows between
  // steps. Called between steps, after the prefix cache has taken the rows it stores.
  void trim_windows();
  // Every layer of model `c`: attention layers with rows reserved for `reserve_positions` (a sliding
  // layer's at most 2W), linear layers with a zero state and no rows.
  void init(const model::ModelConfig& c, int64_t reserve_positions);
  int64_t bytes() const;

  // The layer state as blocks of positions, whatever each layer keeps (the prefix cache's view).
  bool has_recurrent_layers() const { return !linear.empty(); }
  // Whether every row-keeping layer still holds position `start` (a sliding layer may have dropped it).
  bool holds_from(int64_t start) const;
  // The rows of positions [start, start + n).
  StateBlock copy_block(int64_t start, int64_t n) const;
  // The recurrent state now (after the last position appended) as a block's `after`; no rows.
  StateBlock snapshot() const;
  // Appends a block's n positions to the row-keeping layers (the cache holds exactly its positions
  // before it); takes its `after` as the recurrent state when it has one.
  void append_block(const StateBlock& b, int64_t n);

 private:
  bool keeps_rows(std::size_t layer) const;  // every layer but the recurrent ones
  void reserve_rows(int64_t layer, int64_t positions);  // a sliding layer's at most 2W
};

struct AttentionShape {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 0;               // on q·k (1/sqrt(head_dim))
  int64_t window = 0;            // 0: every earlier position; W: positions p-W+1 .. p
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

// A sequence's per-layer state, one kind per layer as its mixer block keeps it (llama.cpp splits
// its memory into KV and recurrent caches alike): the rows an attention layer keeps per position
// (GQA's K and V; MLA's latent and RoPE key, with DSA's index key in the same row), or a Gated
// DeltaNet layer's recurrent state. KvCache holds one per layer; the prefix cache, the scheduler
// and --resume see it only through its methods, so a new kind is a change here and in its block.
#pragma once
#include <cstdint>
#include <variant>
#include <vector>

#include "model/model_config.hpp"
#include "runtime/blocks/gated_deltanet.hpp"

namespace moerun::runtime {

// An attention layer's rows: K [positions, k_dim] and V [positions, v_dim] in fp32. For MLA one
// row of k_dim = kv_lora_rank + qk_rope_head_dim (+ DSA's index key) and no V (v_dim 0). A sliding
// layer (window W > 0) drops the positions no later query can see, so its rows start at `start`.
struct RowState {
  int64_t k_dim = 0, v_dim = 0, window = 0;
  int64_t start = 0;  // position of row 0
  std::vector<float> k, v;

  int64_t rows() const { return static_cast<int64_t>(k.size()) / k_dim; }
  int64_t length() const { return start + rows(); }  // positions covered
  void append(const float* k_rows, const float* v_rows, int64_t n);  // v_rows unused when v_dim is 0
  void trim(int64_t keep);  // keeps the last `keep` positions (no-op when it holds fewer)
  void reserve(int64_t positions);  // a sliding layer's at most 2W
};

using LayerState = std::variant<RowState, DeltaNetState>;

// Positions [start, start + n) of a sequence's state as the prefix cache keeps them: each row-keeping
// layer's rows, and the recurrent layers' state after the block where one was taken (empty: none).
struct StateBlock {
  std::vector<std::vector<float>> k, v;  // [layer]; empty for a layer without rows
  std::vector<DeltaNetState> after;  // [layer]
  int64_t bytes() const;
};

class KvCache {
 public:
  // Every layer rows of k_dim and v_dim; `windows` per layer (empty: all full).
  void init(int64_t layers, int64_t k_dim, int64_t v_dim, int64_t reserve_positions, const std::vector<int64_t>& windows = {});
  // Every layer of model `c`: attention layers with rows reserved for `reserve_positions` (a sliding
  // layer's at most 2W), linear layers with a zero recurrent state.
  void init(const model::ModelConfig& c, int64_t reserve_positions);

  // A layer's state as its kind (Internal error for the other kind).
  RowState& row_state(int64_t layer);
  const RowState& row_state(int64_t layer) const;
  DeltaNetState& recurrent(int64_t layer);

  int64_t rows(int64_t layer) const { return row_state(layer).rows(); }
  int64_t length(int64_t layer) const { return row_state(layer).length(); }
  void append(int64_t layer, const float* k_rows, const float* v_rows, int64_t n) { row_state(layer).append(k_rows, v_rows, n); }
  void trim(int64_t layer, int64_t keep) { row_state(layer).trim(keep); }
  // Sliding layers that hold 2W rows or more keep their last W - 1 (all a later query can see):
  // amortised, a row is moved at most once, and a layer never holds more than 2W rows between
  // steps. Called between steps, after the prefix cache has taken the rows it stores.
  void trim_windows();
  int64_t bytes() const;

  // The layer state as blocks of positions, whatever each layer keeps (the prefix cache's view).
  bool has_recurrent_layers() const { return recurrent_layers_ > 0; }
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
  std::vector<LayerState> layers_;
  int64_t recurrent_layers_ = 0;
};

}  // namespace moerun::runtime

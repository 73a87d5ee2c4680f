// KvCache's per-layer state kinds: a hybrid model's layers each keep their own kind (rows, sliding
// rows, a recurrent state), a layer is reached only as its kind, and a block of positions copied out
// and appended to a fresh cache gives the same rows.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "runtime/layer_state.hpp"

namespace moerun::runtime {
namespace {

model::ModelConfig hybrid() {  // layer 0 full attention, 1 recurrent, 2 sliding (W = 3)
  model::ModelConfig c;
  c.num_layers = 3;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.layer_attention = {model::AttentionKind::Full, model::AttentionKind::Linear, model::AttentionKind::Sliding};
  c.sliding_window = 3;
  c.linear = {.k_heads = 1, .v_heads = 2, .k_dim = 2, .v_dim = 3, .conv_kernel = 2};
  return c;
}

TEST(LayerState, EachLayerKeepsItsKind) {
  const model::ModelConfig c = hybrid();
  KvCache kv;
  kv.init(c, 8);
  EXPECT_TRUE(kv.has_recurrent_layers());
  EXPECT_EQ(kv.row_state(0).k_dim, 4);
  EXPECT_EQ(kv.row_state(0).v_dim, 4);
  EXPECT_EQ(kv.row_state(2).window, 3);
  EXPECT_EQ(kv.recurrent(1).recurrent.size(), static_cast<std::size_t>(2 * 2 * 3)) << "S [v_heads, k_dim, v_dim]";
  EXPECT_THROW(kv.row_state(1), Error);
  EXPECT_THROW(kv.recurrent(0), Error);
  EXPECT_GT(kv.bytes(), 0);
}

TEST(LayerState, BlocksCopyAndAppendEveryKind) {
  const model::ModelConfig c = hybrid();
  KvCache kv;
  kv.init(c, 8);
  for (int64_t p = 0; p < 6; ++p) {
    const std::vector<float> row(4, static_cast<float>(p));
    kv.append(0, row.data(), row.data(), 1);
    kv.append(2, row.data(), row.data(), 1);
  }
  std::fill(kv.recurrent(1).recurrent.begin(), kv.recurrent(1).recurrent.end(), 7.0f);
  kv.trim_windows();  // the sliding layer held 2W: it keeps its last W - 1
  EXPECT_EQ(kv.row_state(2).start, 4);
  EXPECT_FALSE(kv.holds_from(3));
  EXPECT_TRUE(kv.holds_from(4));
  StateBlock b = kv.copy_block(4, 2);
  b.after = kv.snapshot().after;
  KvCache again;
  again.init(c, 8);
  for (int64_t l : {0, 2}) again.trim(l, 0);
  again.row_state(0).start = again.row_state(2).start = 4;
  again.append_block(b, 2);
  EXPECT_EQ(again.row_state(0).k, std::vector<float>(kv.row_state(0).k.begin() + 16, kv.row_state(0).k.end()));
  EXPECT_EQ(again.row_state(2).k, kv.row_state(2).k);
  EXPECT_EQ(again.recurrent(1).recurrent, kv.recurrent(1).recurrent);
}

}  // namespace
}  // namespace moerun::runtime

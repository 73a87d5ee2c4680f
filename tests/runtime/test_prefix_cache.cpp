// PrefixCache on hand-made K/V: reuse of whole blocks only, keys that depend on position and on
// everything before a block, routing carried along, and LRU eviction that never strands a child.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "runtime/prefix_cache.hpp"

namespace moerun::runtime {
namespace {

constexpr int64_t kLayers = 2, kKvDim = 3, kTopK = 2, kB = 4;

// K/V rows whose values name (layer, position, token), and routing slots naming (layer, position).
void fill(const std::vector<int32_t>& prompt, KvCache& kv, PromptRouting& routing) {
  kv.init(kLayers, kKvDim, kKvDim, static_cast<int64_t>(prompt.size()));
  routing.assign(kLayers, {});
  for (int64_t l = 0; l < kLayers; ++l)
    for (std::size_t p = 0; p < prompt.size(); ++p) {
      std::vector<float> k(kKvDim), v(kKvDim);
      for (int64_t i = 0; i < kKvDim; ++i) {
        k[i] = static_cast<float>(l * 100000 + static_cast<int64_t>(p) * 1000 + prompt[p] + i);
        v[i] = -k[i];
      }
      kv.append(l, k.data(), v.data(), 1);
      routing[l].push_back(static_cast<int32_t>(l * 10 + static_cast<int64_t>(p)));
      routing[l].push_back(static_cast<int32_t>(-1));
    }
}

TEST(PrefixCache, ReusesWholeBlocksWithTheirKvAndRouting) {
  PrefixCache cache({1 << 20, kB}, kLayers, kLayers, kKvDim, kKvDim, kTopK);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  KvCache kv;
  PromptRouting routing;
  fill(a, kv, routing);
  cache.insert(a, 10, kv, routing);  // blocks [0, 4) and [4, 8)
  EXPECT_EQ(cache.counters().inserted_blocks, 2);

  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 8, 42, 43, 44};
  KvCache got;
  got.init(kLayers, kKvDim, kKvDim, 11);
  PromptRouting r;
  EXPECT_EQ(cache.reuse(b, 10, got, r), 8);
  KvCache want;
  PromptRouting want_r;
  fill(b, want, want_r);
  for (int64_t l = 0; l < kLayers; ++l) {
    const RowState &g = got.row_state(l), &w = want.row_state(l);
    EXPECT_EQ(g.k, std::vector<float>(w.k.begin(), w.k.begin() + 8 * kKvDim));
    EXPECT_EQ(g.v, std::vector<float>(w.v.begin(), w.v.begin() + 8 * kKvDim));
    EXPECT_EQ(r[l], std::vector<int32_t>(want_r[l].begin(), want_r[l].begin() + 8 * kTopK));
  }
  // max_tokens below a block boundary stops at the block before it.
  KvCache kv2;
  kv2.init(kLayers, kKvDim, kKvDim, 8);
  EXPECT_EQ(cache.reuse(b, 7, kv2, r), 4);
  EXPECT_EQ(cache.counters().skipped_tokens, 12);
}

// A hybrid model (layer 0 attention, layer 1 recurrent): the recurrent state travels as a snapshot
// after the block where a prefill stopped, and a prefix is reusable only up to its last snapshot.
TEST(PrefixCache, RecurrentLayersReuseUpToTheirLastSnapshot) {
  model::ModelConfig c;
  c.num_layers = 2;
  c.num_heads = 1;
  c.num_kv_heads = 1;
  c.head_dim = kKvDim;
  c.layer_attention = {model::AttentionKind::Full, model::AttentionKind::Linear};
  c.linear = {.k_heads = 1, .v_heads = 1, .k_dim = 2, .v_dim = 2, .conv_kernel = 2};
  PrefixCache cache({1 << 20, kB}, 2, 1, kKvDim, kKvDim, kTopK, {0, 1});
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  KvCache kv;
  kv.init(c, 16);
  PromptRouting routing(1);
  auto prefill = [&](int64_t from, int64_t to) {  // rows naming their position; the state its last one
    for (int64_t p = from; p < to; ++p) {
      const std::vector<float> row(kKvDim, static_cast<float>(p));
      kv.append(0, row.data(), row.data(), 1);
      routing[0].insert(routing[0].end(), {static_cast<int32_t>(p), -1});
      std::fill(kv.recurrent(1).recurrent.begin(), kv.recurrent(1).recurrent.end(), static_cast<float>(p));
    }
  };
  prefill(0, 4);
  cache.insert(a, 4, kv, routing);  // block [0, 4) with the state after it
  prefill(4, 9);
  cache.insert(a, 9, kv, routing);  // block [4, 8) without one: the prefill stopped at 9
  EXPECT_EQ(cache.counters().inserted_blocks, 2);
  KvCache got;
  got.init(c, 16);
  PromptRouting r;
  EXPECT_EQ(cache.reuse(a, 9, got, r), 4);  // not 8: block [4, 8) has no state after it
  EXPECT_EQ(got.rows(0), 4);
  EXPECT_EQ(got.row_state(0).k[3 * kKvDim], 3.0f);
  EXPECT_EQ(got.recurrent(1).recurrent, std::vector<float>(kv.recurrent(1).recurrent.size(), 3.0f));
  EXPECT_THROW(got.row_state(1), moerun::Error);  // the recurrent layer keeps no rows
}

TEST(PrefixCache, KeysDependOnPositionAndOnTheWholePrefix) {
  PrefixCache cache({1 << 20, kB}, kLayers, kLayers, kKvDim, kKvDim, kTopK);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 0};
  KvCache kv;
  PromptRouting routing;
  fill(a, kv, routing);
  cache.insert(a, 8, kv, routing);
  KvCache out;
  PromptRouting r;
  // Block [5..8] of a, but at position 0: not the same K/V.
  out.init(kLayers, kKvDim, kKvDim, 8);
  EXPECT_EQ(cache.reuse({5, 6, 7, 8, 1, 2, 3, 4, 0}, 8, out, r), 0);
  // Same second block after another first block: not reusable either.
  out.init(kLayers, kKvDim, kKvDim, 8);
  EXPECT_EQ(cache.reuse({9, 2, 3, 4, 5, 6, 7, 8, 0}, 8, out, r), 0);
  // Same first block, other second block: the first only.
  out.init(kLayers, kKvDim, kKvDim, 8);
  EXPECT_EQ(cache.reuse({1, 2, 3, 4, 5, 6, 7, 9, 0}, 8, out, r), 4);
  EXPECT_EQ(cache.first_block_key({1, 2, 3, 4, 77}), cache.first_block_key(a));
  EXPECT_EQ(cache.first_block_key({1, 2, 3}), 0u);
}

TEST(PrefixCache, EvictsLeastRecentChainEndsWithinBudget) {
  // Room for 3 blocks.
  PrefixCache probe({1 << 20, kB}, kLayers, kLayers, kKvDim, kKvDim, kTopK);
  const std::vector<int32_t> a = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 0};
  KvCache kv;
  PromptRouting routing;
  fill(a, kv, routing);
  probe.insert(a, 12, kv, routing);
  const int64_t block = probe.counters().bytes / 3;
  PrefixCache cache({3 * block, kB}, kLayers, kLayers, kKvDim, kKvDim, kTopK);
  cache.insert(a, 12, kv, routing);
  EXPECT_EQ(cache.counters().evicted_blocks, 0);
  // A second prompt sharing the first block adds one block: the end of a's chain goes.
  const std::vector<int32_t> b = {1, 1, 1, 1, 5, 5, 5, 5, 0};
  KvCache kvb;
  PromptRouting rb;
  fill(b, kvb, rb);
  cache.insert(b, 8, kvb, rb);
  EXPECT_EQ(cache.counters().evicted_blocks, 1);
  EXPECT_LE(cache.counters().bytes, 3 * block);
  KvCache out;
  PromptRouting r;
  out.init(kLayers, kKvDim, kKvDim, 12);
  EXPECT_EQ(cache.reuse(a, 12, out, r), 8);  // a's first two blocks are still there
  out.init(kLayers, kKvDim, kKvDim, 12);
  EXPECT_EQ(cache.reuse(b, 8, out, r), 8);
  // A budget below one block stores nothing.
  PrefixCache none({block - 1, kB}, kLayers, kLayers, kKvDim, kKvDim, kTopK);
  EXPECT_FALSE(none.can_store());
  none.insert(a, 12, kv, routing);
  EXPECT_EQ(none.counters().bytes, 0);
}

}  // namespace
}  // namespace moerun::runtime

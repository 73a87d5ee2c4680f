// PrefixCache: K/V and routing of prompt prefixes, shared between requests. A prompt is cut into
// blocks of B tokens; block i is keyed by a hash chained over every token before it and its start
// position, so a key names "these tokens at these positions after exactly that prefix" (a key on
// the block's token ids alone would hand one request another's K/V). Blocks are stored once and
// evicted least-recently-used within a byte budget. K/V rows depend only on the tokens at and
// before them, so a request that starts from cached rows computes what it would have computed
// itself (the tokens are batch-independent; see e2e_infer), and skips that part of its prefill.
// Linear-attention layers (Gated DeltaNet) have no rows: their state after a block is kept as a
// snapshot where a sequence's prefill stopped exactly at the block's end (the scheduler cuts prompt
// chunks there), and a prefix is reusable up to its last block with a snapshot. Which layer keeps
// what is KvCache's to say: the cache stores and restores its StateBlocks.
#pragma once
#include "base/counter_fields.hpp"
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

#include "runtime/attention.hpp"

namespace moerun::runtime {

struct PrefixCacheConfig {
  int64_t max_bytes = 0;  // 0: off
  int64_t block_tokens = 16;
  void validate() const;  // Usage error naming the option
};

struct PrefixCacheCounters {
  int64_t lookups = 0;  // prompts looked up
  int64_t hits = 0;  // prompts that reused at least one block
  int64_t skipped_tokens = 0;  // prompt tokens whose prefill was skipped
  int64_t inserted_blocks = 0;
  int64_t evicted_blocks = 0;
  int64_t bytes = 0;  // held now

  static const std::vector<CounterField<PrefixCacheCounters>>& fields() {
    using P = PrefixCacheCounters;
    static const std::vector<CounterField<P>> f{counter("lookups", &P::lookups),
                                                counter("hits", &P::hits),
                                                counter("skipped_prefill_tokens", &P::skipped_tokens),
                                                counter("inserted_blocks", &P::inserted_blocks),
                                                counter("evicted_blocks", &P::evicted_blocks),
                                                counter("bytes", &P::bytes)};
    return f;
  }
};

// Expert slots of a sequence's prompt tokens, per MoE layer: [moe layer][position * top_k + j].
using PromptRouting = std::vector<std::vector<int32_t>>;

class PrefixCache {
 public:
  // `layers` hold K/V, the first `moe_layers` of the routing's rows expert slots; `linear` marks the
  // linear-attention layers (empty: none).
  PrefixCache(const PrefixCacheConfig& cfg, int64_t layers, int64_t moe_layers, int64_t k_dim, int64_t v_dim, int64_t top_k,
              std::vector<uint8_t> linear = {});

  // The longest cached block-aligned prefix of `prompt` of at most `max_tokens` tokens: its K/V rows
  // are appended to `kv` (empty on entry) and its expert slots to `routing`. Returns its length.
  int64_t reuse(const std::vector<int32_t>& prompt, int64_t max_tokens, KvCache& kv, PromptRouting& routing);
  // Stores the full blocks among the first `n` prompt tokens of a sequence whose K/V and routing
  // cover them (and whose linear layers' state is the one after token n).
  void insert(const std::vector<int32_t>& prompt, int64_t n, const KvCache& kv, const PromptRouting& routing);
  // Whether the first block of `prompt` is cached.
  bool has_first_block(const std::vector<int32_t>& prompt) const;
  // Key of the first block (0 when the prompt is shorter than a block): two prompts with equal keys
  // share at least one block.
  uint64_t first_block_key(const std::vector<int32_t>& prompt) const;

  const PrefixCacheCounters& counters() const { return c_; }
  int64_t block_tokens() const { return cfg_.block_tokens; }
  // Whether a block fits the budget at all (else insert() stores nothing).
  bool can_store() const { return cfg_.max_bytes >= block_bytes(); }

 private:
  struct Block {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;  // [B]
    StateBlock state;  // the layers' rows of the block; the recurrent state after it, if taken
    std::vector<std::vector<int32_t>> experts;  // [moe layer][B * top_k]
    int64_t bytes = 0;
    std::list<uint64_t>::iterator lru;
  };
  uint64_t block_key(uint64_t parent, const int32_t* tokens, int64_t start) const;
  int64_t block_bytes() const;
  void touch(const std::vector<uint64_t>& chain);  // a chain of keys from the first block on
  void evict_to_fit();

  PrefixCacheConfig cfg_;
  int64_t layers_, moe_layers_, k_dim_, v_dim_, top_k_;
  std::vector<uint8_t> linear_;  // [layer]: 1 for a linear-attention layer (no K/V rows): for the block's size
  std::unordered_map<uint64_t, Block> blocks_;
  std::list<uint64_t> lru_;  // most recent first
  PrefixCacheCounters c_;
};

}  // namespace moerun::runtime

// Block-chained prefix cache of K/V rows and routing.
#include "runtime/prefix_cache.hpp"

#include <algorithm>

#include "base/error.hpp"
#include "base/host.hpp"
#include "base/xxh64.hpp"

namespace moerun::runtime {

void PrefixCacheConfig::validate() const {
  if (max_bytes < 0) fail_config("max_bytes", "must be >= 0 (0: off)");
  // A budget beyond physical memory would end in the OOM killer instead of evictions.
  if (const int64_t have = host_memory_bytes(); have > 0 && max_bytes > have)
    fail_config("max_bytes", "of ", max_bytes >> 20, " MiB is more than this host's memory (", have >> 20, " MiB)");
  if (block_tokens < 1 || block_tokens > 4096) fail_config("block_tokens", "must be in [1, 4096], not ", block_tokens);
}

PrefixCache::PrefixCache(const PrefixCacheConfig& cfg, int64_t layers, int64_t moe_layers, int64_t k_dim, int64_t v_dim, int64_t top_k,
                         std::vector<uint8_t> linear)
    : cfg_(cfg), layers_(layers), moe_layers_(moe_layers), k_dim_(k_dim), v_dim_(v_dim), top_k_(top_k), linear_(std::move(linear)) {
  linear_.resize(static_cast<std::size_t>(layers_), 0);
}

uint64_t PrefixCache::block_key(uint64_t parent, const int32_t* tokens, int64_t start) const {
  Xxh64 h;
  h.value(parent);
  h.value(start);
  h.bytes(tokens, static_cast<std::size_t>(cfg_.block_tokens) * sizeof(int32_t));
  const uint64_t k = h.digest();
  return k == 0 ? 1 : k;  // 0 is "no parent"
}

int64_t PrefixCache::block_bytes() const {
  const int64_t B = cfg_.block_tokens;
  const int64_t kv_layers = layers_ - std::count(linear_.begin(), linear_.end(), 1);
  return B * static_cast<int64_t>(sizeof(int32_t)) + kv_layers * B * (k_dim_ + v_dim_) * static_cast<int64_t>(sizeof(float)) +
         moe_layers_ * B * top_k_ * static_cast<int64_t>(sizeof(int32_t));
}

uint64_t PrefixCache::first_block_key(const std::vector<int32_t>& prompt) const {
  if (static_cast<int64_t>(prompt.size()) < cfg_.block_tokens) return 0;
  return block_key(0, prompt.data(), 0);
}

bool PrefixCache::has_first_block(const std::vector<int32_t>& prompt) const {
  const uint64_t k = first_block_key(prompt);
  return k != 0 && blocks_.count(k) > 0;
}

int64_t PrefixCache::reuse(const std::vector<int32_t>& prompt, int64_t max_tokens, KvCache& kv, PromptRouting& routing) {
  ++c_.lookups;
  const int64_t B = cfg_.block_tokens;
  routing.assign(static_cast<std::size_t>(moe_layers_), {});
  uint64_t parent = 0;
  std::vector<uint64_t> chain;
  std::size_t usable = 0;  // blocks of the chain that can be reused: all, or up to the last snapshot
  for (int64_t n = 0; n + B <= max_tokens; n += B) {
    const uint64_t key = block_key(parent, prompt.data() + n, n);
    auto it = blocks_.find(key);
    // The stored tokens and parent are compared too: a hash collision must not pass for a hit.
    if (it == blocks_.end() || it->second.parent != parent ||
        !std::equal(it->second.tokens.begin(), it->second.tokens.end(), prompt.begin() + n))
      break;
    chain.push_back(key);
    if (!kv.has_recurrent_layers() || !it->second.state.after.empty()) usable = chain.size();
    parent = key;
  }
  chain.resize(usable);
  for (uint64_t key : chain) {  // the last block's state snapshot, if any, is the one that stays
    const Block& b = blocks_.at(key);
    kv.append_block(b.state, B);
    for (int64_t m = 0; m < moe_layers_; ++m) routing[m].insert(routing[m].end(), b.experts[m].begin(), b.experts[m].end());
  }
  const int64_t n = static_cast<int64_t>(chain.size()) * B;
  touch(chain);
  if (n > 0) ++c_.hits;
  c_.skipped_tokens += n;
  return n;
}

void PrefixCache::insert(const std::vector<int32_t>& prompt, int64_t n, const KvCache& kv, const PromptRouting& routing) {
  const int64_t B = cfg_.block_tokens;
  if (cfg_.max_bytes < block_bytes()) return;
  uint64_t parent = 0;
  std::vector<uint64_t> chain;
  for (int64_t start = 0; start + B <= n; start += B) {
    const uint64_t key = block_key(parent, prompt.data() + start, start);
    if (blocks_.find(key) == blocks_.end()) {
      // A sliding layer may have dropped the block's rows already: the chain ends there.
      if (!kv.holds_from(start)) break;
      Block b;
      b.parent = parent;
      b.tokens.assign(prompt.begin() + start, prompt.begin() + start + B);
      b.state = kv.copy_block(start, B);
      b.experts.resize(static_cast<std::size_t>(moe_layers_));
      for (int64_t m = 0; m < moe_layers_; ++m)
        b.experts[m].assign(routing[m].begin() + start * top_k_, routing[m].begin() + (start + B) * top_k_);
      lru_.push_front(key);
      b.lru = lru_.begin();
      b.bytes = block_bytes();
      blocks_.emplace(key, std::move(b));
      ++c_.inserted_blocks;
      c_.bytes += block_bytes();
    }
    Block& b = blocks_.at(key);
    if (kv.has_recurrent_layers() && start + B == n && b.state.after.empty()) {  // the recurrent state is the one after this block
      StateBlock snapshot = kv.snapshot();
      const int64_t added = snapshot.bytes();
      b.state.after = std::move(snapshot.after);
      b.bytes += added;
      c_.bytes += added;
    }
    chain.push_back(key);
    parent = key;
  }
  touch(chain);
  evict_to_fit();
}

void PrefixCache::touch(const std::vector<uint64_t>& chain) {
  // Deepest block first, so that every parent ends up more recent than its children.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) lru_.splice(lru_.begin(), lru_, blocks_.at(*it).lru);
}

void PrefixCache::evict_to_fit() {
  // touch() keeps every parent more recent than its children: the least recent blocks are the
  // ends of chains, and no block outlives its parent.
  while (c_.bytes > cfg_.max_bytes && !lru_.empty()) {
    c_.bytes -= blocks_.at(lru_.back()).bytes;
    blocks_.erase(lru_.back());
    lru_.pop_back();
    ++c_.evicted_blocks;
  }
}

}  // namespace moerun::runtime

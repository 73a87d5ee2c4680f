// Config fields to flags.
#include "launch/option_names.hpp"

#include <map>

namespace moerun::launch {

std::string option_name(const std::string& field) {
  static const std::map<std::string, std::string> flags{
      {"engine.model", "--model"},
      {"input", "--input"},
      {"output", "--output"},
      {"stats_json", "--stats-json"},
      {"trace", "--trace"},
      {"logits_out", "--logits-out"},
      {"defaults.max_new_tokens", "--max-new-tokens"},
      {"defaults.temperature", "--temperature"},
      {"defaults.top_p", "--top-p"},
      {"engine.micro_batches", "--micro-batches"},
      {"engine.routers_per_node", "--routers-per-node"},
      {"engine.router_nodes", "--router-nodes"},
      {"engine.ranks_per_node", "--ranks-per-node"},
      {"engine.comm_timeout_s", "--comm-timeout"},
      {"engine.a2a", "--a2a"},
      {"engine.device", "--device"},
      {"mla_attention", "--mla-attention"},
      {"huge_pages", "--huge-pages"},
      {"engine.affinity", "--affinity"},
      {"engine.placement_file", "--placement"},
      {"engine.swap_control", "--swap-control"},
      {"engine.rebalance_every", "--rebalance-every"},
      {"engine.redundant", "--redundant"},
      {"engine.transport.internode", "MOERUN_INTERNODE"},
      {"engine.transport.ucx_peer_errors", "MOERUN_UCX_PEER_ERRORS"},
      {"engine.router.capacity_factor_prefill", "--capacity-factor-prefill (or --capacity-factor)"},
      {"engine.router.capacity_factor_decode", "--capacity-factor-decode (or --capacity-factor)"},
      {"engine.router.top_p_experts", "--top-p-experts"},
      {"engine.router.load_penalty", "--load-penalty"},
      {"engine.router.temperature", "--router-temperature"},
      {"engine.cache.warmup_requests", "--warmup-requests"},
      {"engine.cache.l1_bytes", "--l1-bytes"},
      {"engine.memory_budget", "--memory-budget"},
      {"engine.node_memory", "--node-memory"},
      {"engine.cache.l2_bytes", "--l2-bytes"},
      {"engine.cache.l2_dir", "--l2-dir"},
      {"engine.cache.io_threads", "--io-threads"},
      {"scheduler.max_batch_size", "--max-batch-size"},
      {"scheduler.max_batch_tokens", "--max-batch-tokens"},
      {"scheduler.similarity_threshold", "--batching-threshold"},
      {"scheduler.pool", "--batching-pool"},
      {"scheduler.max_wait_steps", "--batching-max-wait"},
      {"prefix_cache.max_bytes", "--prefix-cache-mb"},
      {"prefix_cache.block_tokens", "--prefix-cache-block"},
      {"text", "--text"},
      {"tokens", "--tokens"},
      {"context", "--context"},
      {"stride", "--stride"},
      {"json_out", "--json"},
      {"save_logits", "--save-logits"},
      {"kl_base", "--kl-base"},
  };
  // Sub-configs validated on their own (the cache options, --device) name fields without the path.
  for (const char* prefix : {"", "engine.", "engine.cache.", "engine.router."}) {
    auto it = flags.find(prefix + field);
    if (it != flags.end()) return it->second;
  }
  return field;
}

}  // namespace moerun::launch

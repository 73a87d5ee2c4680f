// Summary and stats JSON of `moerun infer`.
#include "runtime/stats_json.hpp"

#include <cstdio>

#include "base/log.hpp"

namespace moerun::runtime {
namespace {

nlohmann::json cache_json(const experts::CacheCounters& c) {
  nlohmann::json j = counters_json(c);
  j["l1_hit_rate"] = c.l1_hit_rate();
  j["l2_hit_rate"] = c.l2_hit_rate();
  j["prefetch_precision"] = c.prefetch_precision();
  j["prefetch_recall"] = c.prefetch_recall();
  return j;
}

std::string cache_summary(const experts::CacheCounters& c) {
  return str("expert cache: L1 hit rate ", c.l1_hit_rate(), " (", c.l1_hits, "/", c.l1_hits + c.l1_misses, "), L2 hit rate ",
             c.l2_hit_rate(), ", L3 reads ", c.l3_reads, " (", c.l3_bytes_read >> 20, " MiB), stall ", c.stall_s, " s, prefetch precision ",
             c.prefetch_precision(), " recall ", c.prefetch_recall(), ", warm-up loads ", c.warmup_loads, " (", c.warmup_used,
             " used), L2 corrupt ", c.l2_corrupt);
}

double rate(double n, double s) {
  return s > 0 ? n / s : 0.0;
}

double tokens_per_s(const InferReport& rep) {
  return rate(static_cast<double>(rep.processed_tokens), rep.seconds);
}

}  // namespace

void print_infer_summary(const InferConfig& cfg, const InferReport& rep, const RoutingStats& stats) {
  if (cfg.quiet) return;
  std::fputs(stats.summary(tokens_per_s(rep)).c_str(), stderr);
  const ThroughputCounters& t = rep.run;
  if (t.prefill_tokens + t.decode_tokens > 0)
    log::info("throughput (of step time): prefill ", t.prefill_tokens, " prompt tokens in ", t.prefill_seconds,
              " s of steps with prompt tokens (", rate(static_cast<double>(t.prefill_tokens), t.prefill_seconds), " tokens/s), decode ",
              t.decode_tokens, " tokens in ", t.decode_seconds, " s of decode-only steps (",
              rate(static_cast<double>(t.decode_tokens), t.decode_seconds), " tokens/s), ",
              t.first_token_s >= 0 ? str("first token after ", t.first_token_s, " s") : std::string("no token generated (scoring only)"),
              "; the progress line's rates are of wall time (", rep.seconds, " s)");
  if (rep.tokenize.text_prompts + rep.tokenize.chat_prompts > 0)
    log::info("tokenized ", rep.tokenize.text_prompts, " text and ", rep.tokenize.chat_prompts, " chat prompt(s) in ", rep.tokenize.seconds,
              " s before the run (chat: through the model's chat template)");
  const EngineReport& e = rep.engine;
  if (e.cache_on) log::info(cache_summary(e.cache));
  if (e.balance.on) log::info(e.balance.summary());
  if (rep.prefix_on)
    log::info("prefix cache: ", rep.prefix.hits, " of ", rep.prefix.lookups, " prompts reused a prefix, ", rep.prefix.skipped_tokens,
              " prompt tokens not recomputed; ", rep.prefix.bytes >> 20, " MiB held, ", rep.prefix.evicted_blocks, " blocks evicted");
  if (e.remote_model)
    log::info("object store: ", e.object_store.requests, " requests, ", e.object_store.retries, " retries, ", e.object_store.bytes >> 20,
              " MiB");
}

std::string infer_stats_json(const InferConfig& cfg, const InferReport& rep, const RoutingStats& stats) {
  nlohmann::json j = nlohmann::json::parse(stats.to_json(tokens_per_s(rep), rep.seconds));
  const EngineReport& e = rep.engine;
  if (e.cache_on) {
    j["cache"] = cache_json(e.cache);
    nlohmann::json per = nlohmann::json::object();
    for (const auto& [r, c] : e.cache_per_rank) per[std::to_string(r)] = cache_json(c);
    j["cache_per_rank"] = per;
  }
  if (e.balance.on) j["balance"] = e.balance.to_json();
  j["journal"] = counters_json(rep.journal);
  j["tokenize"] = {
      {"text_prompts", rep.tokenize.text_prompts}, {"chat_prompts", rep.tokenize.chat_prompts}, {"seconds", rep.tokenize.seconds}};
  j["huge_pages"] = e.huge_pages;
  j["memory_budget"] = {{"bytes_per_rank", e.memory_budget.bytes}, {"source", e.memory_budget.source}};
  if (cfg.scheduler.batching == Batching::MinHash) {
    const BatchingCounters& bc = rep.batching;
    j["batching"] = counters_json(bc);
    j["batching"]["policy"] = "minhash";
    j["batching"]["mean_similarity"] = bc.joined_similar ? bc.similarity_sum / static_cast<double>(bc.joined_similar) : 0.0;
  }
  if (!cfg.engine.swap_control.empty()) {
    j["hot_swap"] = counters_json(e.hot_swap);
    j["hot_swap"]["pause_ms_per_expert"] = e.hot_swap.pause_ms_per_expert();
  }
  if (rep.prefix_on) j["prefix_cache"] = counters_json(rep.prefix);
  j["throughput"] = counters_json(rep.run);
  if (e.remote_model) j["object_store"] = counters_json(e.object_store);
  return j.dump(2);
}

}  // namespace moerun::runtime

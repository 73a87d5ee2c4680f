// Resume keys: what a journaled result was computed from, so that `--resume` never takes a result
// made for another request, another model or other routing options. A request's key is its own
// fingerprint (io::request_fingerprint) and the run's: the model's bytes (every dense tensor as read,
// every expert's xxh64) and the routing options that change results. Scheduling options (batch
// sizes, micro-batches, layout) do not enter: without capacity limits they do not change tokens.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/expert_shards.hpp"
#include "io/model_file.hpp"
#include "io/requests.hpp"
#include "io/result_journal.hpp"
#include "router/router_config.hpp"

namespace moerun::runtime {

// xxh64 over the config and every dense tensor (router ranks compute it as they load).
uint64_t dense_fingerprint(const io::DenseWeights& w);
// xxh64 over every expert's checksum in (layer, expert) order (expert ranks, from the shard index).
uint64_t experts_fingerprint(const io::ExpertShardIndex& index, const model::ModelConfig& c);
uint64_t routing_fingerprint(const router::RouterConfig& r);
// One fingerprint from the parts, in this order.
uint64_t combine_fingerprints(const std::vector<uint64_t>& parts);

// id -> "REQUEST_FP-RUN_FP" (hex) for every request.
io::JournalKeys journal_keys(const std::vector<io::Request>& requests, uint64_t run_fingerprint);

}  // namespace moerun::runtime

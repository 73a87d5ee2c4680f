// The end of a job in words and in JSON: the summary lines on stderr and --stats-json, the
// counter sections derived from their field tables (base/counter_fields.hpp).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "base/counter_fields.hpp"
#include "runtime/infer.hpp"
#include "runtime/routing_stats.hpp"

namespace moerun::runtime {

// {field name: value} for every field of a counter struct.
template <typename S>
nlohmann::json counters_json(const S& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const CounterField<S>& f : S::fields()) {
    if (f.i)
      j[f.name] = s.*f.i;
    else
      j[f.name] = s.*f.d;
  }
  return j;
}

// The summary lines rank 0 prints at the end (routing, throughput, cache, prefix cache, object store).
void print_infer_summary(const InferConfig& cfg, const InferReport& rep, const RoutingStats& stats);
// The --stats-json document.
std::string infer_stats_json(const InferConfig& cfg, const InferReport& rep, const RoutingStats& stats);

}  // namespace moerun::runtime

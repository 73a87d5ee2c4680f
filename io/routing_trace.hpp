// Routing traces (`infer --trace FILE.h5`): per layer, the expert ids chosen for every token, row i
// of every layer being the same token. The input of the affinity graph (DESIGN §5).
//   attrs: format="moe-trace", format_version=1, num_layers, num_experts, top_k
//   /layers/{l}/experts [tokens, top_k] int32  (-1: slot dropped by capacity)
//   /tokens/request [tokens] int64 (input line), /tokens/position [tokens] int32
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moerun::io {

struct RoutingTrace {
  int64_t num_layers = 0;
  int64_t num_experts = 0;
  int64_t top_k = 0;
  std::vector<std::vector<int32_t>> experts;  // [layer][token * top_k + slot]
  std::vector<int64_t> request;  // [token]
  std::vector<int32_t> position;  // [token]

  int64_t tokens() const { return static_cast<int64_t>(request.size()); }
};

// Written atomically (temp file + rename).
void write_routing_trace(const std::string& path, const RoutingTrace& trace);
RoutingTrace read_routing_trace(const std::string& path);
// The files one `infer --trace PATH` run wrote: PATH (router 0), PATH.1, PATH.2, ... as exist.
std::vector<std::string> routing_trace_files(const std::string& path);

}  // namespace moerun::io

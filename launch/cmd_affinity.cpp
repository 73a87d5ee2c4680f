// `moerun affinity build|show`: the expert-affinity graph from routing traces (infer --trace).
#include <cstdio>
#include <iostream>

#include "experts/affinity_graph.hpp"
#include "io/affinity_file.hpp"
#include "io/hdf5_probe.hpp"
#include "io/input_file.hpp"
#include "io/output_file.hpp"
#include "io/routing_trace.hpp"
#include "launch/cli.hpp"
#include "launch/environment.hpp"

namespace moerun::launch {
namespace {

int affinity_build(int argc, char** argv) {
  std::vector<std::string> traces;
  std::string out;
  po::options_description o("affinity build options");
  // clang-format off
  o.add_options()
    ("trace", po::value(&traces)->required(), "routing trace from `moerun infer --trace` (repeat for several; each router's file)")
    ("out", po::value(&out)->required(), "the graph, HDF5 (written atomically)");
  // clang-format on
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun affinity build --trace trace.h5 [--trace …] --out affinity.h5", o, vm)) return 0;
  std::vector<io::PathUse> inputs;
  for (const auto& t : traces) inputs.push_back({t, "--trace"});
  check_output_files({{out, "--out"}}, inputs);
  for (const auto& t : traces) io::require_input_file(t, "--trace");
  hdf5_probe_from(Environment::read()).check(traces);
  std::vector<io::RoutingTrace> loaded;
  for (const auto& t : traces) loaded.push_back(io::read_routing_trace(t));
  const io::AffinityGraph g = experts::build_affinity_graph(loaded, traces);
  io::write_affinity_graph(out, g);
  std::printf("affinity: %lld tokens from %zu trace(s), %lld layers x %lld experts (top-%lld) -> %s\n", static_cast<long long>(g.tokens),
              traces.size(), static_cast<long long>(g.num_layers), static_cast<long long>(g.num_experts), static_cast<long long>(g.top_k),
              out.c_str());
  return 0;
}

int affinity_show(int argc, char** argv) {
  std::string graph;
  int top = 20;
  int64_t min_count = 1;
  po::options_description o("affinity show options");
  // clang-format off
  o.add_options()
    ("graph", po::value(&graph)->required(), "affinity graph (moerun affinity build)")
    ("top", po::value(&top)->default_value(top), "edges to print")
    ("min-count", po::value(&min_count)->default_value(min_count), "ignore edges seen for fewer tokens");
  // clang-format on
  po::positional_options_description pos;
  pos.add("graph", 1);
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun affinity show [--graph] affinity.h5 [--top N]", o, vm, &pos)) return 0;
  if (top < 0) fail(ErrorKind::Usage, "--top must be >= 0, not ", top);
  if (min_count < 0) fail(ErrorKind::Usage, "--min-count must be >= 0, not ", min_count);
  io::require_input_file(graph, "--graph");
  hdf5_probe_from(Environment::read()).check({graph});
  const io::AffinityGraph g = io::read_affinity_graph(graph);
  std::printf("# %s: %lld tokens, %lld layers x %lld experts, top-%lld\n", graph.c_str(), static_cast<long long>(g.tokens),
              static_cast<long long>(g.num_layers), static_cast<long long>(g.num_experts), static_cast<long long>(g.top_k));
  std::printf(
      "# next: P(expert j at layer l+1 | expert i at layer l), summing to top-k over j;\n"
      "# coactivation: P(j also in the top-k | i in the top-k) at layer l\n");
  std::printf("#%-12s %5s %5s %5s %10s %11s\n", "kind", "layer", "from", "to", "tokens", "probability");
  for (const auto& e : experts::strongest_edges(g, top, min_count))
    std::printf(" %-12s %5lld %5lld %5lld %10lld %11.4f\n", e.kind.c_str(), static_cast<long long>(e.layer), static_cast<long long>(e.from),
                static_cast<long long>(e.to), static_cast<long long>(e.count), e.probability);
  std::printf("# expert frequency per layer (share of tokens with the expert in their top-k):\n");
  for (int64_t l = 0; l < g.num_layers; ++l) {
    std::printf("  layer %lld:", static_cast<long long>(l));
    for (int64_t e = 0; e < g.num_experts; ++e) std::printf(" %.3f", g.freq(l, e));
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int cmd_affinity(int argc, char** argv) {
  static const std::vector<CommandRow> rows{{"build", affinity_build, "the expert-affinity graph from routing traces (HDF5)"},
                                            {"show", affinity_show, "print a graph: per layer, each expert's frequency"}};
  return run_subcommand(argc, argv, "affinity", "unknown affinity command", rows);
}

}  // namespace moerun::launch

// `moerun placement plan|show`: a placement planned from routing traces (experts/placement_plan),
// and the expected rows per expert rank of a placement against round-robin.
#include <cstdio>
#include <iostream>

#include "base/error.hpp"
#include "experts/backend.hpp"
#include "experts/cpu/expert_packing.hpp"
#include "experts/placement_plan.hpp"
#include "io/hdf5_probe.hpp"
#include "io/input_file.hpp"
#include "io/model_location.hpp"
#include "io/output_file.hpp"
#include "io/routing_trace.hpp"
#include "launch/cli.hpp"
#include "launch/environment.hpp"
#include "runtime/memory_plan.hpp"

namespace moerun::launch {
namespace {

// The layout the placement is for, as mpirun will start it.
struct LayoutOptions {
  int64_t nodes = 1, ranks_per_node = 0, routers_per_node = 1;
  void add(po::options_description& o) {
    // clang-format off
    o.add_options()
      ("nodes", po::value(&nodes)->default_value(nodes), "nodes of the run")
      ("ranks-per-node", po::value(&ranks_per_node)->required(), "ranks per node of the run (routers included)")
      ("routers-per-node", po::value(&routers_per_node)->default_value(routers_per_node), "router ranks per node");
    // clang-format on
  }
  comm::Topology topology() const {
    if (nodes < 1 || nodes > 4096) fail(ErrorKind::Usage, "--nodes must be in [1, 4096], not ", nodes);
    if (ranks_per_node < 2 || ranks_per_node > 4096) fail(ErrorKind::Usage, "--ranks-per-node must be in [2, 4096], not ", ranks_per_node);
    if (routers_per_node < 1 || routers_per_node >= ranks_per_node)
      fail(ErrorKind::Usage, "--routers-per-node must be in [1, --ranks-per-node), not ", routers_per_node);
    std::vector<int> node_of;
    for (int64_t n = 0; n < nodes; ++n)
      for (int64_t r = 0; r < ranks_per_node; ++r) node_of.push_back(static_cast<int>(n));
    return comm::topology_from_nodes(node_of, static_cast<int>(routers_per_node));
  }
};

// The model's config, its model.h5 walked by the HDF5 probe first.
model::ModelConfig model_config_of(const std::string& model) {
  const io::ModelLocation location = io::model_location(model, s3_from_environment({}));
  hdf5_probe_from(Environment::read()).check({location.file("model.h5")});
  return io::read_model_config(location);
}

experts::ExpertLoads read_loads(const std::vector<std::string>& traces) {
  for (const auto& t : traces) io::require_input_file(t, "--trace");
  hdf5_probe_from(Environment::read()).check(traces);
  std::vector<io::RoutingTrace> loaded;
  for (const auto& t : traces) loaded.push_back(io::read_routing_trace(t));
  return experts::loads_from_traces(loaded, traces);
}

// Per layer: the busiest rank, the mean and the imbalance under round-robin and under `p`.
void print_balance(const experts::Placement& p, const std::string& name, const experts::ExpertLoads& loads, const comm::Topology& topo,
                   int64_t granule) {
  const experts::Placement rr = experts::round_robin_placement(loads.num_layers, loads.num_experts, topo);
  const auto before = experts::expected_balance(rr, loads, topo, granule);
  const auto after = experts::expected_balance(p, loads, topo, granule);
  std::printf("# expected rows per expert rank (%lld routed rows; replicated experts split as the routers split them, %s)\n",
              static_cast<long long>(loads.total()),
              granule > 0 ? str("at multiples of ", granule, " rows").c_str() : "each expert whole to one holder");
  std::printf("%-6s %-12s %10s %10s %9s  rows per expert rank (ranks", "layer", "placement", "busiest", "mean", "imbalance");
  for (int r : topo.experts) std::printf(" %d", r);
  std::printf(")\n");
  for (std::size_t l = 0; l < after.size(); ++l)
    for (const auto& [label, b] : {std::pair{"round-robin", &before[l]}, std::pair{name.c_str(), &after[l]}}) {
      std::printf("%-6zu %-12s %10lld %10.1f %9.3f ", l, label, static_cast<long long>(b->max_rows), b->mean_rows, b->imbalance());
      for (int64_t v : b->rank_rows) std::printf(" %lld", static_cast<long long>(v));
      std::printf("\n");
    }
  std::printf("all    %-12s %32.3f\nall    %-12s %32.3f\n", "round-robin", experts::overall_imbalance(before), name.c_str(),
              experts::overall_imbalance(after));
}

// The most experts an expert rank can hold in `device_bytes` by inspect's memory model.
int64_t experts_that_fit(const model::ModelConfig& c, const runtime::MemoryPlanConfig& base) {
  runtime::MemoryPlanConfig p = base;
  Matmul mm;
  p.packed_bytes_per_expert = experts::packed_expert_bytes(mm, c);
  int64_t lo = 0, hi = c.num_moe_layers() * c.num_experts;
  while (lo < hi) {  // the largest n that fits
    p.experts_per_rank = (lo + hi + 1) / 2;
    if (runtime::plan_memory(c, p).expert_fits)
      lo = p.experts_per_rank;
    else
      hi = p.experts_per_rank - 1;
  }
  return lo;
}

// What the model adds to a plan: a check that the traces are of it, its router groups (unless
// --groups), the memory cap of --device-bytes; returns its split granule.
int64_t apply_model(const std::string& model, const experts::ExpertLoads& loads, const LayoutOptions& layout, int64_t device_bytes,
                    experts::PlacementPlanConfig& pc) {
  const model::ModelConfig c = model_config_of(model);
  if (c.num_moe_layers() != loads.num_layers || c.num_experts != loads.num_experts)
    fail(ErrorKind::BadInput, "the traces have ", loads.num_layers, " MoE layers x ", loads.num_experts, " experts, but ", model, " has ",
         c.num_moe_layers(), " x ", c.num_experts);
  if (pc.groups == 0) pc.groups = c.router_groups;
  if (device_bytes > 0) {
    runtime::MemoryPlanConfig mp;
    mp.nodes = layout.nodes;
    mp.ranks_per_node = layout.ranks_per_node;
    mp.routers_per_node = layout.routers_per_node;
    mp.device_bytes = device_bytes;
    pc.max_experts_per_rank = experts_that_fit(c, mp);
    if (pc.max_experts_per_rank == 0)
      fail(ErrorKind::Usage, "--device-bytes ", device_bytes, " holds no expert of ", model,
           " next to an expert rank's buffers (moerun inspect --model ", model, " --nodes ", layout.nodes, " --ranks-per-node ",
           layout.ranks_per_node, " prints them)");
  }
  return experts::replica_row_granule(c, experts::DeviceKind::Cpu);
}

int placement_plan(int argc, char** argv) {
  std::vector<std::string> traces;
  std::string out, model;
  LayoutOptions layout;
  experts::PlacementPlanConfig pc;
  int64_t device_bytes = 0, granule = 1;
  po::options_description o("placement plan options");
  // clang-format off
  o.add_options()
    ("trace", po::value(&traces)->required(), "routing trace from `moerun infer --trace` (repeat: each router's file, several runs)")
    ("out", po::value(&out)->required(), "the placement file, JSON (written atomically)")
    ("redundant", po::value(&pc.redundant)->default_value(pc.redundant), "extra expert slots per layer for replicas of the hottest experts")
    ("groups", po::value(&pc.groups)->default_value(pc.groups), "expert groups kept on one node (0: the model's router groups with --model, else none)")
    ("model", po::value(&model), "the model (a directory or s3://...): its router groups, and its memory per rank for --device-bytes")
    ("device-bytes", po::value(&device_bytes)->default_value(device_bytes),
     "memory per expert rank, a hard limit on the experts it holds (inspect's model; needs --model; 0: no limit)");
  // clang-format on
  layout.add(o);
  po::variables_map vm;
  if (!parse_command_line(argc, argv,
                          "usage: moerun placement plan --trace trace.h5 [--trace …] --nodes N --ranks-per-node R "
                          "[--routers-per-node K] [--redundant X] --out placement.json",
                          o, vm))
    return 0;
  const comm::Topology topo = layout.topology();
  if (device_bytes < 0) fail(ErrorKind::Usage, "--device-bytes must be >= 0, not ", device_bytes);
  if (pc.redundant < 0) fail(ErrorKind::Usage, "--redundant must be >= 0, not ", pc.redundant);
  if (pc.groups < 0) fail(ErrorKind::Usage, "--groups must be >= 0, not ", pc.groups);
  if (device_bytes > 0 && model.empty()) fail(ErrorKind::Usage, "--device-bytes needs --model (the model's sizes)");
  std::vector<io::PathUse> inputs;
  for (const auto& t : traces) inputs.push_back({t, "--trace"});
  if (!model.empty() && !io::is_s3_url(model))
    for (const auto& f : io::ModelLocation(model).input_files()) inputs.push_back({f, "--model"});
  check_output_files({{out, "--out"}}, inputs);
  const experts::ExpertLoads loads = read_loads(traces);
  if (pc.groups > 0 && loads.num_experts % pc.groups != 0)
    fail(ErrorKind::Usage, "--groups ", pc.groups, " does not divide the ", loads.num_experts, " experts of a layer into equal groups");
  if (!model.empty()) granule = apply_model(model, loads, layout, device_bytes, pc);
  const experts::PlacementPlan plan = experts::plan_placement(loads, topo, pc);
  // Why fewer extra slots than asked: one copy per expert rank is the most that helps, and
  // --device-bytes may hold fewer experts.
  const int64_t useful = (static_cast<int64_t>(topo.experts.size()) - 1) * loads.num_experts;
  const std::string capped =
      plan.redundant >= pc.redundant ? ""
      : plan.redundant < std::min(pc.redundant, useful)
          ? str(" (", pc.redundant, " asked: ", pc.max_experts_per_rank, " experts per rank fit in --device-bytes)")
          : str(" (", pc.redundant, " asked: beyond ", useful, " every expert rank would hold a copy of every expert)");
  io::write_file_atomically(out, {plan.placement.to_json()});
  std::printf(
      "placement: %lld layers x %lld experts over %zu expert ranks (%lld nodes; %lld layers packed nodes first), "
      "%lld extra slots per layer (%lld replicas in all)%s -> %s\n",
      static_cast<long long>(loads.num_layers), static_cast<long long>(loads.num_experts), topo.experts.size(),
      static_cast<long long>(layout.nodes), static_cast<long long>(plan.hierarchical_layers), static_cast<long long>(plan.redundant),
      static_cast<long long>(plan.placement.replicas()), capped.c_str(), out.c_str());
  print_balance(plan.placement, "planned", loads, topo, granule);
  return 0;
}

int placement_show(int argc, char** argv) {
  std::vector<std::string> traces;
  std::string file, model;
  LayoutOptions layout;
  po::options_description o("placement show options");
  // clang-format off
  o.add_options()
    ("placement", po::value(&file)->required(), "the placement file (moerun placement plan, or written by hand)")
    ("trace", po::value(&traces)->required(), "routing trace(s) whose loads to expect")
    ("model", po::value(&model), "the model: its experts' split granule (every row on CPUs with AVX-512; else bf16 experts at 512 rows, float32 never)");
  // clang-format on
  layout.add(o);
  po::variables_map vm;
  if (!parse_command_line(argc, argv,
                          "usage: moerun placement show --placement placement.json --trace trace.h5 [--trace …] --nodes N "
                          "--ranks-per-node R [--routers-per-node K]",
                          o, vm))
    return 0;
  const comm::Topology topo = layout.topology();
  const experts::ExpertLoads loads = read_loads(traces);
  const experts::Placement p = experts::placement_from_json(file, loads.num_layers, loads.num_experts, topo);
  std::printf("# %s: %lld replicas\n%s", file.c_str(), static_cast<long long>(p.replicas()), p.describe().c_str());
  print_balance(p, "this file", loads, topo,
                model.empty() ? 1 : experts::replica_row_granule(model_config_of(model), experts::DeviceKind::Cpu));
  return 0;
}

}  // namespace

int cmd_placement(int argc, char** argv) {
  static const std::vector<CommandRow> rows{{"plan", placement_plan, "a placement with replicas of hot experts, from routing traces"},
                                            {"show", placement_show, "a placement's expected load per rank"}};
  return run_subcommand(argc, argv, "placement", "unknown placement command", rows);
}

}  // namespace moerun::launch

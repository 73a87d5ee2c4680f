// `moerun inspect`: config, parameter counts, memory per rank.
#include <cstdio>
#include <iostream>

#include "experts/cpu/expert_packing.hpp"
#include "base/error.hpp"
#include "io/hdf5_probe.hpp"
#include "convert/hf_checkpoint.hpp"
#include "convert/hf_convert.hpp"
#include "io/input_file.hpp"
#include "io/model_file.hpp"
#include "io/model_location.hpp"
#include "launch/bench/alltoallv_bench.hpp"
#include "launch/cli.hpp"
#include "launch/environment.hpp"
#include "runtime/exchange_time.hpp"
#include "runtime/memory_budget.hpp"
#include "runtime/memory_plan.hpp"

namespace moerun::launch {

namespace {
// --memory-budget: how one process of this model would divide it (runtime/memory_budget).
std::string budget_section(const model::ModelConfig& c, const runtime::MemoryPlanConfig& p, const std::string& budget,
                           const std::string& dense, bool local) {
  if (budget.empty()) return "";
  const runtime::MemoryBudget b =
      budget == "auto" ? runtime::default_memory_budget(1) : runtime::MemoryBudget{parse_bytes(budget, "memory-budget"), "--memory-budget"};
  if (b.bytes <= 0) fail(ErrorKind::Usage, "--memory-budget must be a size > 0 or auto, not \"", budget, "\"");
  const int64_t context = p.context > 0 ? p.context : c.max_position;
  return runtime::budget_plan_report(c, b, parse_dense_quantization(dense), p.max_batch_tokens, p.batch * context, p.batch, 2,
                                     p.packed_bytes_per_expert, local);
}
// --link-fit: a decode step's exchange time over the links `bench a2a --json` measured.
std::string exchange_section(const model::ModelConfig& c, const runtime::MemoryPlanConfig& p, const std::string& path,
                             const bench::A2aFitFile& file) {
  if (path.empty()) return "";
  std::vector<bench::MoeExchangeFits> fits;
  for (const char* algo : {"mpi", "hier", "alltoallv"})
    if (const bench::MoeExchangeFits f = bench::moe_exchange_fits(file, algo); f.dispatch) fits.push_back(f);
  if (fits.empty()) fail(ErrorKind::BadInput, path, ": fits has no m2n, n2m or uniform pattern (bench a2a --patterns m2n,n2m)");
  const runtime::StepExchange s = runtime::step_exchange(c, p.batch, p.micro_batches);
  char buf[480];
  std::string out = str("exchange per decode step (--link-fit ", path, ": measured on ", file.ranks, " ranks, ", file.nodes, " node(s)");
  if (file.ranks != p.nodes * p.ranks_per_node || file.nodes != p.nodes)
    out += str("; this layout is ", p.nodes * p.ranks_per_node, " ranks on ", p.nodes, ": the fit holds for it where the links are alike");
  out += ")\n";
  std::snprintf(buf, sizeof buf,
                "  %lld tokens per router in %lld micro-batch(es): %lld dispatch + combine pairs, %.0f bytes out and %.0f back each\n",
                static_cast<long long>(s.tokens_per_router), static_cast<long long>(s.micro_batches), static_cast<long long>(s.exchanges),
                s.dispatch_bytes, s.combine_bytes);
  out += buf;
  for (const bench::MoeExchangeFits& f : fits) {
    const comm::LinkModel &d = f.dispatch->model, &b = f.combine->model;
    std::snprintf(buf, sizeof buf,
                  "  %-9s dispatch by the %s times (%zu sizes; their line: alpha %.1f us, %.3f GB/s, largest error %.0f%%), "
                  "combine by the %s times (%zu sizes; alpha %.1f us, %.3f GB/s, largest error %.0f%%): %.2f ms per step\n",
                  f.dispatch->algo.c_str(), f.dispatch->pattern.c_str(), d.measured.size(), d.alpha_us, d.bandwidth_gbps, 100 * d.max_error,
                  f.combine->pattern.c_str(), b.measured.size(), b.alpha_us, b.bandwidth_gbps, 100 * b.max_error,
                  1e3 * runtime::step_exchange_seconds(s, d, b));
    out += buf;
  }
  return out;
}
}  // namespace

int cmd_inspect(int argc, char** argv) {
  std::string model, hf_config, budget, node_memory, link_fit, dense = "none";
  runtime::MemoryPlanConfig p;
  po::options_description o("inspect options");
  // clang-format off
  o.add_options()
    ("model", po::value(&model), "model: a directory or s3://bucket/prefix")
    ("hf-config", po::value(&hf_config),
     "plan from a Hugging Face config.json alone, no weights (stored as bfloat16): instead of --model")
    ("batch", po::value(&p.batch)->default_value(p.batch), "sequences in flight per router rank")
    ("context", po::value(&p.context)->default_value(p.context), "context length per sequence (0: max_position)")
    ("experts-per-rank", po::value(&p.experts_per_rank)->default_value(p.experts_per_rank),
     "experts held by one expert rank (0: all)")
    ("max-batch-tokens", po::value(&p.max_batch_tokens)->default_value(p.max_batch_tokens), "tokens per step")
    ("micro-batches", po::value(&p.micro_batches)->default_value(p.micro_batches), "micro-batches per step")
    ("nodes", po::value(&p.nodes)->default_value(p.nodes), "nodes in the layout")
    ("ranks-per-node", po::value(&p.ranks_per_node)->default_value(p.ranks_per_node), "ranks per node (1 node x 1 rank: one process)")
    ("routers-per-node", po::value(&p.routers_per_node)->default_value(p.routers_per_node), "router ranks per node")
    ("device-bytes", po::value(&p.device_bytes)->default_value(p.device_bytes), "memory per rank to check against (0: no check)")
    ("node-memory", po::value(&node_memory), "memory per node (SIZE, e.g. 256G): whether a node's ranks fit, and how many such nodes hold every expert in memory")
    ("memory-budget", po::value(&budget),
     "also print how one process would divide this budget (SIZE, or auto: the cgroup limit or MemAvailable), as infer does")
    ("quantize-dense", po::value(&dense)->default_value(dense), "with --memory-budget: the dense part as infer --quantize-dense holds it")
    ("link-fit", po::value(&link_fit),
     "predict a decode step's exchange time (--batch tokens per router) from the alpha-beta fits of this `bench a2a --json` file");
  // clang-format on
  ObjectStoreOptions object_store;
  object_store.add(o);
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun inspect --model DIR|s3://BUCKET/PREFIX | --hf-config CONFIG.json [options]", o, vm))
    return 0;
  if (model.empty() == hf_config.empty()) fail(ErrorKind::Usage, "give one of --model and --hf-config");
  if (!node_memory.empty()) {
    p.node_bytes = parse_bytes(node_memory, "node-memory");
    if (p.node_bytes <= 0) fail(ErrorKind::Usage, "--node-memory must be a size > 0, not \"", node_memory, "\"");
  }
  p.validate();
  // Read before anything is printed: a bad file is an error, not half a report.
  const bench::A2aFitFile fit_file = link_fit.empty() ? bench::A2aFitFile{} : bench::read_a2a_fit_file(link_fit);
  if (!hf_config.empty()) {
    if (!io::check_regular_file(hf_config)) fail(ErrorKind::Io, hf_config, ": no such file");
    const std::string text = convert::text_model_config(io::read_regular_file(hf_config), hf_config);  // as convert reads it
    model::ModelConfig c = convert::model_config_from_hf(text, hf_config, DType::BF16, nullptr);
    convert::check_quantization_config(text, hf_config);  // what convert refuses is not planned
    // The experts as convert keeps them: a quantized checkpoint's native form where the shapes allow it.
    if (const WeightScheme s = convert::shipped_expert_scheme(text);
        s != WeightScheme::Plain && c.hidden_size % kQuantGroup == 0 && c.intermediate_size % kQuantGroup == 0) {
      c.expert_format = {c.dtype, s};
      c.format_version = model::required_format_version(c);
    }
    Matmul mm;
    p.packed_bytes_per_expert = experts::packed_expert_bytes(mm, c);
    const std::string report = runtime::inspect_report(c, p, hf_config + " (config only)") + budget_section(c, p, budget, dense, true) +
                               exchange_section(c, p, link_fit, fit_file);
    std::cout << report;
    return 0;
  }
  const io::S3Config s3 = object_store.finish();
  const io::ModelLocation location = io::model_location(model, s3);
  io::Hdf5Probe probe = hdf5_probe_from(Environment::read());
  probe.s3_retries = s3.retries;
  probe.s3_timeout_s = s3.timeout_s;
  probe.check({location.file("model.h5")});
  const model::ModelConfig c = io::read_model_config(location);
  Matmul mm;
  p.packed_bytes_per_expert = experts::packed_expert_bytes(mm, c);
  const std::string report = runtime::inspect_report(c, p, model) + budget_section(c, p, budget, dense, !location.remote()) +
                             exchange_section(c, p, link_fit, fit_file);
  std::cout << report;
  return 0;
}

}  // namespace moerun::launch

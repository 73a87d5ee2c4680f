// `moerun inspect`: config, parameter counts, memory per rank.
#include <iostream>

#include "experts/cpu/expert_packing.hpp"
#include "base/error.hpp"
#include "io/hdf5_probe.hpp"
#include "convert/hf_checkpoint.hpp"
#include "convert/hf_convert.hpp"
#include "io/input_file.hpp"
#include "io/model_file.hpp"
#include "io/model_location.hpp"
#include "launch/cli.hpp"
#include "launch/environment.hpp"
#include "runtime/memory_budget.hpp"
#include "runtime/memory_plan.hpp"

namespace moerun::launch {

namespace {
// --memory-budget: how one process of this model would divide it (runtime/memory_budget).
std::string budget_section(const model::ModelConfig& c, const runtime::MemoryPlanConfig& p, const std::string& budget,
                           const std::string& dense, bool local) {
  if (budget.empty()) return "";
  const runtime::MemoryBudget b = budget == "auto" ? runtime::default_memory_budget(1)
                                                   : runtime::MemoryBudget{parse_bytes(budget, "memory-budget"), "--memory-budget"};
  if (b.bytes <= 0) fail(ErrorKind::Usage, "--memory-budget must be a size > 0 or auto, not \"", budget, "\"");
  const int64_t context = p.context > 0 ? p.context : c.max_position;
  return runtime::budget_plan_report(c, b, parse_dense_quantization(dense), p.max_batch_tokens, p.batch * context, p.batch, 2,
                                     p.packed_bytes_per_expert, local);
}
}  // namespace

int cmd_inspect(int argc, char** argv) {
  std::string model, hf_config, budget, node_memory, dense = "none";
  runtime::MemoryPlanConfig p;
  po::options_description o("inspect options");
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
    ("quantize-dense", po::value(&dense)->default_value(dense), "with --memory-budget: the dense part as infer --quantize-dense holds it");
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
  if (!hf_config.empty()) {
    if (!io::check_regular_file(hf_config)) fail(ErrorKind::Io, hf_config, ": no such file");
    const std::string text = convert::text_model_config(io::read_regular_file(hf_config), hf_config);  // as convert reads it
    model::ModelConfig c = convert::model_config_from_hf(text, hf_config, DType::BF16, nullptr);
    convert::check_quantization_config(text, hf_config);  // what convert refuses is not planned
    // The experts as convert keeps them: a quantized checkpoint's native form where the shapes allow it.
    if (const WeightScheme s = convert::shipped_expert_scheme(text); s != WeightScheme::Plain && c.hidden_size % kQuantGroup == 0 &&
                                                                c.intermediate_size % kQuantGroup == 0) {
      c.expert_format = {c.dtype, s};
      c.format_version = model::required_format_version(c);
    }
    Matmul mm;
    p.packed_bytes_per_expert = experts::packed_expert_bytes(mm, c);
    std::cout << runtime::inspect_report(c, p, hf_config + " (config only)") << budget_section(c, p, budget, dense, true);
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
  std::cout << runtime::inspect_report(c, p, model) << budget_section(c, p, budget, dense, !location.remote());
  return 0;
}

}  // namespace moerun::launch

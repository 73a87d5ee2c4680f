// `moerun infer`: option parsing into InferConfig (engine, job), the environment, then the Job.
#include <iostream>

#include "base/log.hpp"

#include "comm/mpi.hpp"
#include "experts/backend.hpp"
#include "comm/exchange_select.hpp"
#include "launch/cli.hpp"
#include "launch/environment.hpp"
#include "launch/option_names.hpp"
#include "router/router_config.hpp"
#include "runtime/infer.hpp"

namespace moerun::launch {
namespace {

// --capacity-factor sets both phases; a per-phase option overrides it. Given alone, a per-phase
// option switches capacity on and the other phase takes its default (prefill 1.0, decode 1.25).
void resolve_capacity(const po::variables_map& vm, router::RouterConfig& r) {
  const bool both = vm.count("capacity-factor") > 0;
  const bool prefill = vm.count("capacity-factor-prefill") > 0, decode = vm.count("capacity-factor-decode") > 0;
  const double f = both ? vm["capacity-factor"].as<double>() : 0.0;
  r.capacity_factor_prefill = prefill ? vm["capacity-factor-prefill"].as<double>() : both || !decode ? f : router::kDefaultCapacityPrefill;
  r.capacity_factor_decode = decode ? vm["capacity-factor-decode"].as<double>() : both || !prefill ? f : router::kDefaultCapacityDecode;
}

}  // namespace

int cmd_infer(int argc, char** argv) {
  runtime::InferConfig c;
  std::string overflow = "reroute";
  bool check_weights = false;
  double prefix_mb = 0;
  std::string batching = "fifo";
  std::string reasoning = "none";
  std::string template_memory = "1G";
  po::options_description o("infer options");
  // clang-format off
  o.add_options()
    ("model", po::value(&c.engine.model)->required(), "model: a directory or s3://bucket/prefix (model.h5 + experts-*.h5)")
    ("input", po::value(&c.input)->required(), "requests, JSON Lines")
    ("output", po::value(&c.output)->required(), "results, JSON Lines (written atomically at the end)")
    ("resume", po::bool_switch(&c.resume), "skip requests already in OUTPUT.journal")
    ("skip-invalid", po::bool_switch(&c.skip_invalid), "report bad request lines as results with an error field")
    ("reasoning-parser", po::value(&reasoning)->default_value(reasoning),
     "none, or think: in an OpenAI batch file's chat output, the text up to </think> (Qwen3/3.5, DeepSeek-R1/V3.x, GLM-4.5+, "
     "MiniMax-M2, Kimi K2-Thinking) goes to message.reasoning_content and the rest to content")
    ("template-timeout", po::value(&c.tokenizer.templates.seconds)->default_value(c.tokenizer.templates.seconds),
     "seconds one chat template render may take; a render past it is its line's error")
    ("template-memory", po::value(&template_memory)->default_value(template_memory),
     "address space of the chat template renderer (SIZE); a render past it is its line's error")
    ("max-new-tokens", po::value(&c.defaults.max_new_tokens)->default_value(c.defaults.max_new_tokens), "default per request")
    ("temperature", po::value(&c.defaults.temperature)->default_value(c.defaults.temperature), "default sampling temperature (0: greedy)")
    ("top-p", po::value(&c.defaults.top_p)->default_value(c.defaults.top_p), "default nucleus mass")
    ("seed", po::value(&c.defaults.seed)->default_value(c.defaults.seed), "default sampling seed")
    ("max-batch-size", po::value(&c.scheduler.max_batch_size)->default_value(c.scheduler.max_batch_size), "sequences in flight")
    ("max-batch-tokens", po::value(&c.scheduler.max_batch_tokens)->default_value(c.scheduler.max_batch_tokens), "tokens per step")
    ("batching", po::value(&batching)->default_value(batching),
     "fifo, or minhash: decode together the requests whose prompts used similar experts (MinHash of the expert sets)")
    ("batching-threshold", po::value(&c.scheduler.similarity_threshold)->default_value(c.scheduler.similarity_threshold, "0.7"),
     "minhash: estimated Jaccard similarity a request needs to join a decode batch")
    ("batching-pool", po::value(&c.scheduler.pool)->default_value(c.scheduler.pool),
     "minhash: requests prefilled ahead to choose from (0: 4 x --max-batch-size)")
    ("batching-max-wait", po::value(&c.scheduler.max_wait_steps)->default_value(c.scheduler.max_wait_steps),
     "minhash: steps a prefilled request may wait before it seeds the next batch")
    ("swap-control", po::value(&c.engine.swap_control),
     "hot swap: a JSON file {\"swaps\": [{\"shard\": FILE, \"experts\": [[layer, expert], ...] or \"all\"}]} read "
     "between steps whenever it changes; the experts are verified, then replaced")
    ("prefix-cache-mb", po::value(&prefix_mb)->default_value(prefix_mb),
     "MiB of prompt-prefix K/V kept for requests sharing a prefix (0: off)")
    ("prefix-cache-block", po::value(&c.prefix_cache.block_tokens)->default_value(c.prefix_cache.block_tokens),
     "tokens per prefix-cache block (prefixes are reused in whole blocks)")
    ("capacity-factor", po::value<double>(), "expert capacity factor of both phases (0: unlimited, the default)")
    ("capacity-factor-prefill", po::value<double>(),
     "capacity factor of prompt tokens (default: --capacity-factor, else 1.0 when --capacity-factor-decode is given)")
    ("capacity-factor-decode", po::value<double>(),
     "capacity factor of generated tokens (default: --capacity-factor, else 1.25 when --capacity-factor-prefill is given)")
    ("top-p-experts", po::value(&c.engine.router.top_p_experts)->default_value(c.engine.router.top_p_experts),
     "dynamic top-k: per token, the fewest of its top-k experts whose gate mass reaches P (1: all k)")
    ("overflow", po::value(&overflow)->default_value(overflow), "reroute|drop when an expert is full")
    ("load-penalty", po::value(&c.engine.router.load_penalty)->default_value(c.engine.router.load_penalty), "λ in score - λ·load")
    ("router-temperature", po::value(&c.engine.router.temperature)->default_value(c.engine.router.temperature), "gate softmax temperature")
    ("check-weights", po::bool_switch(&check_weights), "deprecated, does nothing: every weight is checked for NaN/Inf as it loads")
    ("stats-json", po::value(&c.stats_json), "write routing statistics as JSON")
    ("trace", po::value(&c.trace), "write the routing trace (HDF5)")
    ("logits-out", po::value(&c.logits_out), "write the logits of every emitted token (JSONL; for testing)")
    ("quiet", po::bool_switch(&c.quiet), "no progress or summary on stderr");
  // clang-format on
  EngineOptions engine;
  engine.add(o, c.engine);
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun infer --model DIR --input REQS.jsonl --output OUT.jsonl [options]", o, vm)) return 0;
  c.engine.router.overflow = router::parse_overflow(overflow);
  resolve_capacity(vm, c.engine.router);
  c.scheduler.batching = runtime::parse_batching(batching);
  if (reasoning != "none" && reasoning != "think")
    fail(ErrorKind::Usage, "--reasoning-parser must be none or think, not \"", reasoning, "\"");
  c.split_reasoning = reasoning == "think";
  if (!(c.tokenizer.templates.seconds > 0 && c.tokenizer.templates.seconds <= 3600))
    fail(ErrorKind::Usage, "--template-timeout must be in (0, 3600] seconds, not ", c.tokenizer.templates.seconds);
  c.tokenizer.templates.memory_bytes = parse_bytes(template_memory, "template-memory");
  if (c.tokenizer.templates.memory_bytes < (int64_t{64} << 20))
    fail(ErrorKind::Usage, "--template-memory must be at least 64M (the interpreter itself), not \"", template_memory, "\"");
  if (!(prefix_mb >= 0 && prefix_mb <= 1 << 30)) fail(ErrorKind::Usage, "--prefix-cache-mb must be in [0, 2^30], not ", prefix_mb);
  c.prefix_cache.max_bytes = static_cast<int64_t>(prefix_mb * 1048576.0);
  const Environment env = engine.finish(c.engine);
  if (!env.python.empty()) c.tokenizer.python = env.python;
  c.option_name = c.engine.option_name = option_name;
  comm::MpiSession mpi(&argc, &argv);
  if (mpi.size() > 1) log::set_rank(mpi.rank());
  if (mpi.rank() == 0) engine.warn_deprecated();
  if (mpi.rank() == 0 && check_weights)
    log::warn("--check-weights is deprecated and does nothing: every weight is checked for NaN/Inf as it loads");
  const runtime::InferReport rep = runtime::run_infer(c, MPI_COMM_WORLD);
  // Every result is written; a request the model could not compute is bad input (the model's).
  if (rep.failed_requests > 0)
    fail(ErrorKind::BadInput, rep.failed_requests, " request(s) ended with non-finite values (their lines in ", c.output,
         " say where); the other results are complete");
  return 0;
}

}  // namespace moerun::launch

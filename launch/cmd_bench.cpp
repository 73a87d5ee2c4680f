// `moerun bench <what>`: benchmarks with nccl-tests style tables on stdout and --json output.
#include <cstdlib>
#include <iostream>
#include <tuple>

#include "base/weight_scheme_table.hpp"
#include "io/output_file.hpp"
#include "comm/exchange_select.hpp"
#include "launch/cli.hpp"
#include "launch/environment.hpp"
#include "launch/option_names.hpp"
#include "launch/bench/alltoallv_bench.hpp"
#include "experts/backend.hpp"
#include "comm/mpi.hpp"
#include "launch/bench/gemm_bench.hpp"
#include "launch/bench/infer_bench.hpp"
#include "launch/bench/layer_bench.hpp"
#include "launch/bench/deltanet_bench.hpp"
#include "launch/bench/mla_bench.hpp"
#include "launch/bench/scaling_sweep.hpp"

namespace moerun::launch {
namespace {

// --dtype of bench layer and bench gemm.
std::vector<DType> parse_dtype_list(const std::string& list) {
  std::vector<DType> out;
  for (const auto& d : parse_string_list(list)) {
    if (d == "fp32" || d == "float32")
      out.push_back(DType::F32);
    else if (d == "bf16" || d == "bfloat16")
      out.push_back(DType::BF16);
    else
      fail(ErrorKind::Usage, "--dtype: \"", d, "\" is not fp32 or bf16");
  }
  return out;
}

// --sweep and its options, shared by bench infer and bench a2a.
struct SweepOptions {
  bool on = false;
  std::string ranks = "1,2,4,8", nodes, scalings = "weak,strong";
  void add(po::options_description& o) {
    // clang-format off
    o.add_options()
      ("sweep", po::bool_switch(&on), "scaling sweep: run every (ranks, nodes) point on the first R ranks of this job")
      ("sweep-ranks", po::value(&ranks)->default_value(ranks), "sweep: comma-separated rank counts")
      ("sweep-nodes", po::value(&nodes), "sweep: comma-separated virtual node counts (default: nodes as MPI sees them)")
      ("scaling", po::value(&scalings)->default_value(scalings), "sweep: weak, strong or both");
    // clang-format on
  }
  void fill(bench::SweepConfig& c) const {
    c.ranks.clear();
    for (auto r : parse_int_list(ranks, "sweep-ranks")) c.ranks.push_back(static_cast<int>(r));
    if (!nodes.empty())
      for (auto n : parse_int_list(nodes, "sweep-nodes")) c.nodes.push_back(static_cast<int>(n));
    c.scalings = parse_string_list(scalings);
    c.validate();
  }
};

int run_sweep_command(bench::SweepConfig& c, const SweepOptions& so, const std::string& json, const std::string& csv, int* argc,
                      char*** argv) {
  so.fill(c);
  comm::MpiSession mpi(argc, argv);
  if (mpi.rank() == 0) {
    check_output_files({{json, "--json"}, {csv, "--csv"}});
  }
  const auto r = bench::run_sweep(c, MPI_COMM_WORLD);
  if (mpi.rank() == 0) {
    std::cout << bench::sweep_table(r);
    if (!json.empty()) io::write_file_atomically(json, {bench::sweep_json(c, r)});
    if (!csv.empty()) io::write_file_atomically(csv, {bench::sweep_csv(r)});
  }
  return 0;
}

int bench_gemm(int argc, char** argv) {
  bench::GemmBenchConfig c;
  std::string m = "1,2,4,16,32,64,128", dtypes = "fp32,bf16", json;
  po::options_description o("bench gemm options");
  // clang-format off
  o.add_options()
    ("rows", po::value(&c.rows)->default_value(c.rows), "weight rows (output features; an expert's intermediate size)")
    ("cols", po::value(&c.cols)->default_value(c.cols), "weight columns (input features; the hidden size)")
    ("m", po::value(&m)->default_value(m), "comma-separated row counts of x (tokens an expert sees)")
    ("dtype", po::value(&dtypes)->default_value(dtypes), "comma-separated: fp32, bf16, q8, q4, int4, mxfp4, fp8-block (the quantized ones are compared with bf16)")
    ("weight-mb", po::value(&c.weight_mb)->default_value(c.weight_mb), "MB of matrices per dtype (more than the caches hold)")
    ("iters", po::value(&c.iters)->default_value(c.iters), "timed passes over all matrices (best reported)")
    ("json", po::value(&json), "also write the results as JSON");
  // clang-format on
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun bench gemm [options]", o, vm)) return 0;
  c.m = parse_int_list(m, "m");
  std::string plain;
  for (const std::string& d : parse_string_list(dtypes)) {
    if (const auto s = weight_scheme_by_name(d))
      c.schemes.push_back(*s);
    else if (d == "fp32" || d == "bf16" || d == "float32" || d == "bfloat16")
      plain += d + ",";
    else
      fail(ErrorKind::Usage, "--dtype takes fp32, bf16, ", weight_scheme_names([](const WeightSchemeRow&) { return true; }), ", not \"", d,
           "\"");
  }
  c.dtypes = parse_dtype_list(plain);
  c.validate();
  check_output_files({{json, "--json"}});
  const auto r = bench::run_gemm_bench(c);
  std::cout << bench::gemm_bench_table(c, r);
  if (!json.empty()) io::write_file_atomically(json, {bench::gemm_bench_json(c, r)});
  return 0;
}

int bench_layer(int argc, char** argv) {
  bench::LayerBenchConfig c;
  std::string tokens = "64,512", dtypes = "fp32,bf16", json, device = "cpu", shape = "mixtral";
  po::options_description o("bench layer options");
  // clang-format off
  o.add_options()
    ("shape", po::value(&shape)->default_value(shape),
     "layer shape: mixtral (hidden 1024, 8 experts of 3584, top-2), qwen3_moe (Qwen3-30B-A3B's: hidden 2048, 128 experts "
     "of 768, top-8) or deepseek_v2_lite (hidden 2048, 64 experts of 1408, top-6, 2 shared experts); the options below override it")
    ("hidden", po::value(&c.hidden)->default_value(c.hidden), "hidden size")
    ("experts", po::value(&c.experts)->default_value(c.experts), "number of experts")
    ("intermediate", po::value(&c.intermediate)->default_value(c.intermediate), "expert intermediate size")
    ("top-k", po::value(&c.top_k)->default_value(c.top_k), "experts per token")
    ("shared", po::value(&c.shared)->default_value(c.shared), "width of a shared expert on every token (0: none)")
    ("tokens", po::value(&tokens)->default_value(tokens), "comma-separated token counts")
    ("dtype", po::value(&dtypes)->default_value(dtypes), "comma-separated: fp32, bf16")
    ("iters", po::value(&c.iters)->default_value(c.iters), "timed iterations (median reported)")
    ("warmup", po::value(&c.warmup)->default_value(c.warmup), "untimed iterations first")
    ("device", po::value(&device)->default_value(device), "cpu (baseline oneDNN), or cuda (experts on the GPU, baseline cuBLAS)")
    ("json", po::value(&json), "also write the results as JSON");
  // clang-format on
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun bench layer [options]", o, vm)) return 0;
  if (shape == "qwen3_moe") {
    for (auto [name, field, value] : {std::tuple{"hidden", &c.hidden, int64_t{2048}}, std::tuple{"experts", &c.experts, int64_t{128}},
                                      std::tuple{"intermediate", &c.intermediate, int64_t{768}}, std::tuple{"top-k", &c.top_k, int64_t{8}}})
      if (vm[name].defaulted()) *field = value;
  } else if (shape == "deepseek_v2_lite") {
    for (auto [name, field, value] : {std::tuple{"hidden", &c.hidden, int64_t{2048}}, std::tuple{"experts", &c.experts, int64_t{64}},
                                      std::tuple{"intermediate", &c.intermediate, int64_t{1408}}, std::tuple{"top-k", &c.top_k, int64_t{6}},
                                      std::tuple{"shared", &c.shared, int64_t{2816}}})
      if (vm[name].defaulted()) *field = value;
  } else if (shape != "mixtral") {
    fail(ErrorKind::Usage, "--shape must be mixtral, qwen3_moe or deepseek_v2_lite, not \"", shape, "\"");
  }
  with_option_names([&] { c.backend.device = experts::parse_device(device); });
  apply_environment(Environment::read(), c.backend);
  c.tokens = parse_int_list(tokens, "tokens");
  c.dtypes = parse_dtype_list(dtypes);
  check_output_files({{json, "--json"}});
  const auto rows = bench::run_layer_bench(c);
  std::cout << bench::layer_bench_table(c, rows);
  if (!json.empty()) io::write_file_atomically(json, {bench::layer_bench_json(c, rows)});
  return 0;
}

// bench infer's model when no option changes it: 2 layers of 8 experts, hidden 1024.
bench::InferBenchConfig default_infer_bench() {
  bench::InferBenchConfig c;
  model::ModelConfig& m = c.model.model;
  m.vocab_size = 1024;
  m.hidden_size = 1024;
  m.num_layers = 2;
  m.num_heads = 8;
  m.num_kv_heads = 4;
  m.head_dim = 128;
  m.intermediate_size = 2048;
  m.num_experts = 8;
  m.top_k = 2;
  m.max_position = 1024;
  m.bos_token_id = 1;
  m.eos_token_id = 0;
  c.model.shards = 2;
  return c;
}

// --scoring-compare: the prompts as prefill, as prompt log-probs and as perplexity, interleaved.
int run_scoring_compare(const bench::InferBenchConfig& c, int runs, const std::string& json, int* argc, char*** argv) {
  if (runs < 1) fail(ErrorKind::Usage, "--runs must be >= 1");
  comm::MpiSession mpi(argc, argv);
  if (mpi.rank() == 0) check_output_files({{json, "--json"}});
  const auto rows = bench::run_scoring_bench(c, runs, MPI_COMM_WORLD);
  if (mpi.rank() == 0) {
    std::cout << bench::scoring_bench_table(c, rows);
    if (!json.empty()) io::write_file_atomically(json, {bench::scoring_bench_json(c, rows)});
  }
  return 0;
}

// --cache-compare: all-resident against the cache's policies with a small L1, in one job.
int run_cache_compare(bench::InferBenchConfig& c, double l1_fraction, const std::string& l1_budget_of, const std::string& l2_io,
                      const std::string& json, int* argc, char*** argv) {
  if (!(l1_fraction > 0 && l1_fraction <= 1)) fail(ErrorKind::Usage, "--l1-fraction must be in (0, 1]");
  if (l2_io != "direct" && l2_io != "buffered") fail(ErrorKind::Usage, "--l2-io must be direct or buffered");
  c.engine.cache.l2_direct = l2_io == "direct";
  comm::MpiSession mpi(argc, argv);
  if (mpi.rank() == 0) check_output_files({{json, "--json"}});
  if (!l1_budget_of.empty() && !model::is_weight_format_name(l1_budget_of))
    fail(ErrorKind::Usage, "--l1-budget-of must be ", model::weight_format_names_text());
  const auto r = bench::run_cache_bench(c, l1_fraction, MPI_COMM_WORLD, l1_budget_of);
  if (mpi.rank() == 0) {
    std::cout << bench::cache_bench_table(c, l1_fraction, r);
    if (!json.empty()) io::write_file_atomically(json, {bench::cache_bench_json(c, l1_fraction, r)});
  }
  return 0;
}

int bench_infer(int argc, char** argv) {
  bench::InferBenchConfig c = default_infer_bench();
  model::ModelConfig& m = c.model.model;
  std::string json, csv;
  ModelOptions model_options;
  bool no_baseline = false;
  SweepOptions sweep;
  bool cache_compare = false, scoring_compare = false;
  int runs = 3;
  double l1_fraction = 0.25;
  std::string l1_budget_of;
  std::string l2_io = "direct", device = "cpu", a2a = "mpi", quantize_dense = "none";
  po::options_description o("bench infer options");
  model_options.add(o, m);
  // clang-format off
  o.add_options()
    ("batch", po::value(&c.batch)->default_value(c.batch), "requests, all in flight together")
    ("prompt-len", po::value(&c.prompt_len)->default_value(c.prompt_len), "prompt tokens per request")
    ("new-tokens", po::value(&c.new_tokens)->default_value(c.new_tokens), "generated tokens per request")
    ("micro-batches", po::value(&c.engine.micro_batches)->default_value(c.engine.micro_batches), "micro-batches per step (0: 1 in one process, 2 distributed)")
    ("routers-per-node", po::value(&c.engine.routers_per_node)->default_value(c.engine.routers_per_node), "router ranks per node")
    ("router-nodes", po::value(&c.engine.router_nodes)->default_value(c.engine.router_nodes), "routers on the first N nodes only (0: every node)")
    ("ranks-per-node", po::value(&c.engine.ranks_per_node)->default_value(c.engine.ranks_per_node), "virtual node size (0: from MPI)")
    ("no-baseline", po::bool_switch(&no_baseline), "skip the single-process run")
    ("device", po::value(&device)->default_value(device), "where expert ranks keep and compute experts: cpu or cuda")
    ("work-dir", po::value(&c.work_dir), "keep the model and files here (default: a temp dir, removed)")
    ("a2a", po::value(&a2a)->default_value(a2a), "exchange: mpi or hier (auto: a deprecated name for mpi)")
    ("quantize-dense", po::value(&quantize_dense)->default_value(quantize_dense), kQuantizeDenseHelp)
    ("comm-timeout", po::value(&c.engine.comm_timeout_s)->default_value(c.engine.comm_timeout_s), "seconds before a stalled exchange fails")
    ("json", po::value(&json), "also write the results as JSON")
    ("link-fit", po::value(&c.link_fit_path),
     "a `bench a2a --json` file: the routers' exchange time against its alpha-beta fit's prediction for the same steps")
    ("csv", po::value(&csv), "sweep: also write the rows as CSV")
    ("gate-skew", po::value(&c.model.gate_skew)->default_value(c.model.gate_skew), "skewed expert usage of the synthetic model (see synth)")
    ("cache-compare", po::bool_switch(&cache_compare), "all-resident vs --prefetch lru (LRU eviction) vs lru with --warmup hotness vs affinity with a small L1, in one job")
    ("scoring-compare", po::bool_switch(&scoring_compare),
     "the prompts as prefill (one new token) vs prompt log-probs of every token vs perplexity's second half, interleaved")
    ("runs", po::value(&runs)->default_value(runs), "scoring-compare: interleaved runs of each mode")
    ("max-batch-tokens", po::value(&c.scheduler.max_batch_tokens)->default_value(c.scheduler.max_batch_tokens),
     "scoring-compare: tokens per step (the other modes hold the whole batch in one step)")
    ("l1-fraction", po::value(&l1_fraction)->default_value(l1_fraction), "cache-compare: L1 as a fraction of a rank's experts")
    ("l1-budget-of", po::value(&l1_budget_of),
     "cache-compare: size L1 in experts of this format (float32, bfloat16, q8, q4, int4, mxfp4, fp8-block), e.g. --dtype q4 --l1-budget-of bfloat16: "
     "bf16's L1 bytes, which hold 3.2x the q4 experts")
    ("l2-io", po::value(&l2_io)->default_value(l2_io), "cache-compare: L2 reads direct (O_DIRECT) or buffered (page cache)")
    ("io-threads", po::value(&c.engine.cache.io_threads)->default_value(c.engine.cache.io_threads), "cache-compare: loader threads per expert rank");
  // clang-format on
  sweep.add(o);
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: [mpirun -np N] moerun bench infer [options]", o, vm)) return 0;
  m.max_position = std::max<int64_t>(m.max_position, c.prompt_len + c.new_tokens + 1);
  model_options.finish(m);
  with_option_names([&] {
    c.engine.device = experts::parse_device(device);
    c.engine.a2a = comm::parse_a2a(a2a == "auto" ? "mpi" : a2a);
  });
  c.engine.dense_scheme = parse_dense_quantization(quantize_dense);
  apply_environment(Environment::read(), c.engine);
  c.engine.option_name = option_name;
  c.baseline = !no_baseline;
  if (!c.link_fit_path.empty()) {  // before any rank starts
    c.link_fit = bench::read_a2a_fit_file(c.link_fit_path);
    const char* algo = comm::a2a_name(c.engine.a2a);
    if (!bench::moe_exchange_fits(c.link_fit, algo).dispatch)
      fail(ErrorKind::BadInput, c.link_fit_path, ": fits has no ", algo, " fit of pattern m2n, n2m or uniform (bench a2a --algos ", algo,
           " --patterns m2n,n2m)");
  }
  if (sweep.on) {
    bench::SweepConfig sc;
    sc.bench = "infer";
    sc.infer = c;
    return run_sweep_command(sc, sweep, json, csv, &argc, &argv);
  }
  if (!csv.empty()) fail(ErrorKind::Usage, "--csv goes with --sweep (bench infer has one row otherwise; use --json)");
  if (scoring_compare) return run_scoring_compare(c, runs, json, &argc, &argv);
  if (cache_compare) return run_cache_compare(c, l1_fraction, l1_budget_of, l2_io, json, &argc, &argv);
  comm::MpiSession mpi(&argc, &argv);
  if (mpi.rank() == 0) check_output_files({{json, "--json"}});
  const auto r = bench::run_infer_bench(c, MPI_COMM_WORLD);
  if (mpi.rank() == 0) {
    std::cout << bench::infer_bench_table(c, r);
    if (!json.empty()) io::write_file_atomically(json, {bench::infer_bench_json(c, r)});
  }
  return 0;
}

int bench_a2a(int argc, char** argv) {
  bench::A2aBenchConfig c;
  std::string patterns = "uniform,zipf,m2n", algos = "mpi,hier,alltoallv", json, csv;
  SweepOptions sweep;
  int64_t sweep_bytes = int64_t{1} << 20;
  po::options_description o("bench a2a options");
  // clang-format off
  o.add_options()
    ("min-bytes", po::value(&c.min_bytes)->default_value(c.min_bytes), "smallest size per rank (bytes)")
    ("max-bytes", po::value(&c.max_bytes)->default_value(c.max_bytes), "largest size per rank (bytes)")
    ("step-factor", po::value(&c.step_factor)->default_value(c.step_factor), "size multiplier between rows")
    ("iters", po::value(&c.iters)->default_value(c.iters), "timed iterations (min/median/max)")
    ("warmup", po::value(&c.warmup)->default_value(c.warmup), "untimed iterations first")
    ("skew", po::value(&c.skew)->default_value(c.skew), "Zipf exponent of the skewed pattern")
    ("patterns", po::value(&patterns)->default_value(patterns), "comma-separated: uniform, zipf, m2n (routers to expert ranks), n2m (back)")
    ("algos", po::value(&algos)->default_value(algos), "comma-separated: mpi, hier, alltoallv")
    ("routers-per-node", po::value(&c.routers_per_node)->default_value(c.routers_per_node), "routers per node in m2n and n2m")
    ("ranks-per-node", po::value(&c.ranks_per_node)->default_value(c.ranks_per_node), "virtual node size (0: from MPI)")
    ("comm-timeout", po::value(&c.timeout_s)->default_value(c.timeout_s), "seconds before a stalled exchange fails")
    ("json", po::value(&json), "also write JSON")
    ("csv", po::value(&csv), "also write CSV")
    ("sweep-bytes", po::value(&sweep_bytes)->default_value(sweep_bytes), "sweep: bytes per rank at the smallest point");
  // clang-format on
  sweep.add(o);
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: mpirun -np N moerun bench a2a [options]", o, vm)) return 0;
  c.patterns = parse_string_list(patterns);
  c.algos = parse_string_list(algos);
  const Environment env = Environment::read();
  if (c.ranks_per_node == 0) c.ranks_per_node = ranks_per_node_from(env);
  apply_environment(env, c.transport);
  if (sweep.on) {
    bench::SweepConfig sc;
    sc.bench = "a2a";
    sc.a2a = c;
    if (!vm.count("algos") || vm["algos"].defaulted()) sc.a2a.algos = {"mpi", "hier"};
    if (!vm.count("patterns") || vm["patterns"].defaulted()) sc.a2a.patterns = {"uniform"};
    sc.a2a.min_bytes = sc.a2a.max_bytes = sweep_bytes;
    return run_sweep_command(sc, sweep, json, csv, &argc, &argv);
  }
  comm::MpiSession mpi(&argc, &argv);
  if (mpi.rank() == 0) {
    check_output_files({{json, "--json"}, {csv, "--csv"}});
  }
  bench::A2aBenchResult r;
  with_option_names([&] { r = bench::run_a2a_bench(c, MPI_COMM_WORLD); });
  if (mpi.rank() == 0) {
    std::cout << bench::a2a_bench_table(c, r);
    if (!json.empty()) io::write_file_atomically(json, {bench::a2a_bench_json(r)});
    if (!csv.empty()) io::write_file_atomically(csv, {bench::a2a_bench_csv(r)});
  }
  return 0;
}

int bench_mla(int argc, char** argv) {
  bench::MlaBenchConfig c;
  std::string shape = "deepseek_v2_lite", contexts = "512,4096", batch = "1,8", dtype = "bf16", json;
  po::options_description o("bench mla options");
  // clang-format off
  o.add_options()
    ("shape", po::value(&shape)->default_value(shape), "deepseek_v2_lite (hidden 2048, 16 heads), deepseek_v3 (hidden 7168, 128 heads, q_lora 1536) or deepseek_v32 (V3 with DSA: the sparse step against the dense one)")
    ("context", po::value(&contexts)->default_value(contexts), "comma-separated cached positions per sequence")
    ("batch", po::value(&batch)->default_value(batch), "comma-separated sequences decoding together")
    ("dtype", po::value(&dtype)->default_value(dtype), "weights: fp32 or bf16")
    ("iters", po::value(&c.iters)->default_value(c.iters), "timed steps (median reported)")
    ("warmup", po::value(&c.warmup)->default_value(c.warmup), "untimed steps first")
    ("json", po::value(&json), "also write the results as JSON");
  // clang-format on
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun bench mla [options]", o, vm)) return 0;
  const std::vector<DType> dt = parse_dtype_list(dtype);
  if (dt.size() != 1) fail(ErrorKind::Usage, "--dtype takes one of fp32, bf16");
  c.model = bench::mla_bench_shape(shape, dt[0]);
  c.contexts = parse_int_list(contexts, "context");
  c.batch = parse_int_list(batch, "batch");
  check_output_files({{json, "--json"}});
  const auto rows = bench::run_mla_bench(c);
  std::cout << bench::mla_bench_table(c, rows);
  if (!json.empty()) io::write_file_atomically(json, {bench::mla_bench_json(c, rows)});
  return 0;
}

int bench_deltanet(int argc, char** argv) {
  bench::DeltaNetBenchConfig c;
  std::string shape = "qwen3_next", prompts = "512,2048", batch = "1,8,32", json;
  po::options_description o("bench deltanet options");
  // clang-format off
  o.add_options()
    ("shape", po::value(&shape)->default_value(shape), "qwen3_next or qwen3_5_moe (16 key heads, 32 value heads of 128, conv 4)")
    ("prompt", po::value(&prompts)->default_value(prompts), "comma-separated prompt lengths (prefill of one sequence)")
    ("batch", po::value(&batch)->default_value(batch), "comma-separated sequences decoding one token each")
    ("iters", po::value(&c.iters)->default_value(c.iters), "timed runs (median reported)")
    ("warmup", po::value(&c.warmup)->default_value(c.warmup), "untimed runs first")
    ("json", po::value(&json), "also write the results as JSON");
  // clang-format on
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun bench deltanet [options]", o, vm)) return 0;
  c.shape = bench::deltanet_bench_shape(shape);
  c.prompts = parse_int_list(prompts, "prompt");
  c.batch = parse_int_list(batch, "batch");
  check_output_files({{json, "--json"}});
  const auto rows = bench::run_deltanet_bench(c);
  std::cout << bench::deltanet_bench_table(c, rows);
  if (!json.empty()) io::write_file_atomically(json, {bench::deltanet_bench_json(c, rows)});
  return 0;
}

}  // namespace

const std::vector<CommandRow>& bench_kinds() {
  static const std::vector<CommandRow> rows{
      {"layer", bench_layer, "one MoE layer against a plain matmul of the same FLOPs"},
      {"gemm", bench_gemm, "the expert kernels of each weight format against oneDNN"},
      {"infer", bench_infer, "whole decode steps of a synthetic model, one process or under mpirun (tokens/s, exchanges)"},
      {"a2a", bench_a2a, "the flat and hierarchical all-to-all against MPI_Alltoallv, and their alpha-beta fit"},
      {"mla", bench_mla, "multi-head latent attention (DeepSeek-V2/V3, V3.2 sparse) decode steps at each context"},
      {"deltanet", bench_deltanet, "the gated DeltaNet layer (Qwen3-Next, Qwen3.5) in prefill and decode"}};
  return rows;
}

int cmd_bench(int argc, char** argv) {
  return run_subcommand(argc, argv, "bench", "unknown benchmark", bench_kinds());
}

}  // namespace moerun::launch

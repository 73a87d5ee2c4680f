// `moerun bench <what>`: benchmarks with nccl-tests style tables on stdout and --json output.
#include <iostream>

#include "io/result_journal.hpp"
#include "launch/cli.hpp"
#include "runtime/layer_bench.hpp"

namespace moerun::launch {
namespace {

int bench_layer(int argc, char** argv) {
  runtime::LayerBenchConfig c;
  std::string tokens = "64,512", dtypes = "fp32,bf16", json;
  po::options_description o("bench layer options");
  o.add_options()
    ("hidden", po::value(&c.hidden)->default_value(c.hidden), "hidden size")
    ("experts", po::value(&c.experts)->default_value(c.experts), "number of experts")
    ("intermediate", po::value(&c.intermediate)->default_value(c.intermediate), "expert intermediate size")
    ("top-k", po::value(&c.top_k)->default_value(c.top_k), "experts per token")
    ("tokens", po::value(&tokens)->default_value(tokens), "comma-separated token counts")
    ("dtype", po::value(&dtypes)->default_value(dtypes), "comma-separated: fp32, bf16")
    ("iters", po::value(&c.iters)->default_value(c.iters), "timed iterations (median reported)")
    ("warmup", po::value(&c.warmup)->default_value(c.warmup), "untimed iterations first")
    ("json", po::value(&json), "also write the results as JSON");
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun bench layer [options]", o, vm)) return 0;
  c.tokens = parse_int_list(tokens, "tokens");
  c.dtypes.clear();
  for (const auto& d : parse_string_list(dtypes)) {
    if (d == "fp32" || d == "float32") c.dtypes.push_back(DType::F32);
    else if (d == "bf16" || d == "bfloat16") c.dtypes.push_back(DType::BF16);
    else fail(ErrorKind::Usage, "--dtype: \"", d, "\" is not fp32 or bf16");
  }
  if (!json.empty()) io::check_writable(json);
  const auto rows = runtime::run_layer_bench(c);
  std::cout << runtime::layer_bench_table(c, rows);
  if (!json.empty()) io::write_file_atomically(json, {runtime::layer_bench_json(c, rows)});
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  const char* usage = "usage: moerun bench <layer> [options]   (moerun bench layer --help)";
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << usage << "\n";
    return argc < 2 ? 2 : 0;
  }
  const std::string what = argv[1];
  if (what == "layer") return bench_layer(argc - 1, argv + 1);
  fail(ErrorKind::Usage, "unknown benchmark \"", what, "\" (", usage, ")");
}

}  // namespace moerun::launch

// Shared command-line plumbing for the subcommands: Boost.Program_options parsing with --help and
// --config FILE (any long option as `name = value`), and list parsing.
#pragma once
#include <boost/program_options.hpp>
#include <cstring>

#include "base/error.hpp"
#include "model/model_config.hpp"
#include "io/object_store.hpp"
#include "io/output_file.hpp"
#include "launch/environment.hpp"
#include "runtime/infer.hpp"
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace moerun::launch {

namespace po = boost::program_options;

// Parses argv (after the subcommand) into vm. Returns false when --help was printed.
bool parse_command_line(int argc, char** argv, const std::string& usage, po::options_description& opts, po::variables_map& vm,
                        const po::positional_options_description* positional = nullptr);

// One row of a command table: the name, what runs it, one line of what it does. Help texts print
// their lists from these tables, never by hand.
using Subcommand = int (*)(int argc, char** argv);
struct CommandRow {
  const char* name;
  Subcommand run;
  const char* what;
};
// "layer|gemm|infer": the rows' names.
std::string command_names(const std::vector<CommandRow>& rows, const char* separator = "|");

// A command with subcommands (`moerun bench gemm ...`): argv[1] names one of `rows`, which runs on
// argv from there. No subcommand prints the usage (`moerun COMMAND <a|b> [options]` and each row's
// line) and returns 2, --help prints it and returns 0, an unknown one is a Usage error naming it as
// an `unknown` ("unknown benchmark").
int run_subcommand(int argc, char** argv, const char* command, const char* unknown, const std::vector<CommandRow>& rows);

// The benchmarks of `moerun bench` (cmd_bench.cpp), in the order help texts list them.
const std::vector<CommandRow>& bench_kinds();

// Options for every field of a synthetic model's config (synth, bench infer), defaults from `m`;
// the dtype, the family and the layer variants are applied to `m` by finish() after parsing.
struct ModelOptions {
  std::string dtype, family = "mixtral", layer_mlp, layer_types, rope_type;
  int64_t dense_intermediate = 0;
  // Given or not (absent: the family's value); each checked by finish(), never replaced.
  std::optional<int64_t> sliding_window, shared_intermediate, rope_original_max_position;
  std::optional<double> rope_factor;
  void add(po::options_description& o, model::ModelConfig& m);
  void finish(model::ModelConfig& m) const;  // Usage errors naming the option
};

// The expert cache options (infer, bench infer). Call finish() after parsing.
struct CacheOptions {
  std::string budget = "auto", node_memory = "0", l1 = "0", l2 = "16G", prefetch = "gate", l2_io = "direct", l3_io = "direct",
              warmup = "hotness";
  void add(po::options_description& o, runtime::EngineConfig& c);
  void finish(runtime::EngineConfig& c) const;
};

// Object-store options (infer, inspect): --s3-retries, --s3-timeout. finish() reads the standard
// AWS_* variables (AWS_ENDPOINT_URL, AWS_REGION or AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
struct ObjectStoreOptions {
  io::S3Config s3;
  void add(po::options_description& o);
  io::S3Config finish() const;
};
// `c` with the endpoint, region and credentials of the AWS_* variables.
io::S3Config s3_from_environment(io::S3Config c);

// --quantize-dense (infer, perplexity, bench infer): "none", "q8" or "q4" as the scheme the routers
// quantize the LM head and attention projections to (Plain for none); a Usage error otherwise.
WeightScheme parse_dense_quantization(const std::string& name);
inline constexpr const char* kQuantizeDenseHelp =
    "none, q8 or q4: quantize the LM head, the attention and Gated DeltaNet projections, shared experts and dense MLPs at "
    "load (as the experts' q8/q4; MLA's stay as stored): decode reads fewer bytes per token, logits move by about int8's error";

// The engine's options (infer, perplexity): its layout, exchange, device, the expert cache and the
// object store. finish() parses the named values and applies the environment (launch/environment).
struct EngineOptions {
  std::string device = "cpu", placement = "round-robin", a2a = "mpi", mla_attention = "auto", quantize_dense = "none";
  std::string huge_pages = "auto";
  CacheOptions cache;
  ObjectStoreOptions object_store;
  void add(po::options_description& o, runtime::EngineConfig& c);
  // Returns the environment read, for the caller's other settings (MOERUN_PYTHON).
  Environment finish(runtime::EngineConfig& c) const;
  // After MPI_Init, on rank 0: the deprecation warnings of what was given.
  void warn_deprecated() const;
};

// Outputs given on the command line (empty paths skipped): each a regular file or new, none equal
// to an input or to another output (io/output_file.hpp).
void check_output_files(const std::vector<io::PathUse>& outputs, const std::vector<io::PathUse>& inputs = {});

// "64M", "1.5G", "4096" -> bytes (K/M/G/T are powers of 1024); Usage error naming the option.
int64_t parse_bytes(const std::string& s, const std::string& option);

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& option);
std::vector<std::string> parse_string_list(const std::string& s);

int cmd_infer(int argc, char** argv);
int cmd_synth(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_affinity(int argc, char** argv);
int cmd_placement(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_perplexity(int argc, char** argv);

}  // namespace moerun::launch

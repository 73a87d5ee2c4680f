// `moerun synth`: options for every config field, then convert::write_synthetic_model.
#include <iostream>

#include "convert/synthetic_model.hpp"
#include "launch/cli.hpp"

namespace moerun::launch {

int cmd_synth(int argc, char** argv) {
  convert::SynthConfig s;
  model::ModelConfig& m = s.model;
  m.vocab_size = 512;
  m.hidden_size = 256;
  m.num_layers = 4;
  m.num_heads = 8;
  m.num_kv_heads = 4;
  m.head_dim = 32;
  m.intermediate_size = 512;
  m.num_experts = 8;
  m.top_k = 2;
  m.max_position = 1024;
  m.bos_token_id = 1;
  m.eos_token_id = 2;
  std::string out;
  ModelOptions model_options;
  bool quiet = false;
  po::options_description o("synth options");
  o.add_options()("out", po::value(&out)->required(), "output model directory");
  model_options.add(o, m);
  // clang-format off
  o.add_options()
    ("shards", po::value(&s.shards)->default_value(s.shards), "number of expert shard files")
    ("seed", po::value(&s.seed)->default_value(s.seed), "random seed (same seed, same model)")
    ("gate-skew", po::value(&s.gate_skew)->default_value(s.gate_skew), "skewed expert usage: r-th expert of a layer favoured by -s*ln(r+1) (0: uniform random gate)")
    ("gate-topics", po::value(&s.gate_topics)->default_value(s.gate_topics),
     "with --gate-skew: split the vocabulary into N topics, each with its own hot experts (0: one skew for all tokens)")
    ("config-only", po::bool_switch(&s.config_only), "write only model.h5's attributes (for inspect)")
    ("quiet", po::bool_switch(&quiet), "no progress lines");
  // clang-format on
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun synth --out DIR [options]", o, vm)) return 0;
  model_options.finish(m);
  try {
    m.validate("synth options");
  } catch (const Error& e) {
    throw Error(ErrorKind::Usage, e.what());
  }
  convert::write_synthetic_model(out, s, quiet);
  if (!quiet)
    std::cerr << "moerun synth: " << out << ": " << m.total_params() << " parameters (" << m.expert_params() << " in experts), "
              << m.architecture << ", " << dtype_name(m.dtype) << "\n";
  return 0;
}

}  // namespace moerun::launch

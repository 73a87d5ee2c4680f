// `moerun synth`: options for every config field, then io::write_synthetic_model.
#include <iostream>

#include "io/synthetic_model.hpp"
#include "launch/cli.hpp"

namespace moerun::launch {

int cmd_synth(int argc, char** argv) {
  io::SynthConfig s;
  io::ModelConfig& m = s.model;
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
  std::string out, dtype = "float32";
  bool quiet = false;
  po::options_description o("synth options");
  o.add_options()
    ("out", po::value(&out)->required(), "output model directory")
    ("layers", po::value(&m.num_layers)->default_value(m.num_layers), "num_layers")
    ("experts", po::value(&m.num_experts)->default_value(m.num_experts), "num_experts")
    ("top-k", po::value(&m.top_k)->default_value(m.top_k), "experts per token")
    ("hidden", po::value(&m.hidden_size)->default_value(m.hidden_size), "hidden_size")
    ("intermediate", po::value(&m.intermediate_size)->default_value(m.intermediate_size), "expert intermediate_size")
    ("heads", po::value(&m.num_heads)->default_value(m.num_heads), "num_heads")
    ("kv-heads", po::value(&m.num_kv_heads)->default_value(m.num_kv_heads), "num_kv_heads (divides heads)")
    ("head-dim", po::value(&m.head_dim)->default_value(m.head_dim), "head_dim")
    ("vocab", po::value(&m.vocab_size)->default_value(m.vocab_size), "vocab_size")
    ("max-position", po::value(&m.max_position)->default_value(m.max_position), "max_position")
    ("rope-theta", po::value(&m.rope_theta)->default_value(m.rope_theta), "rope_theta")
    ("rms-norm-eps", po::value(&m.rms_norm_eps)->default_value(m.rms_norm_eps), "rms_norm_eps")
    ("bos", po::value(&m.bos_token_id)->default_value(m.bos_token_id), "bos_token_id")
    ("eos", po::value(&m.eos_token_id)->default_value(m.eos_token_id), "eos_token_id")
    ("dtype", po::value(&dtype)->default_value(dtype), "float32 or bfloat16")
    ("shards", po::value(&s.shards)->default_value(s.shards), "number of expert shard files")
    ("seed", po::value(&s.seed)->default_value(s.seed), "random seed (same seed, same model)")
    ("quiet", po::bool_switch(&quiet), "no progress lines");
  po::variables_map vm;
  if (!parse_command_line(argc, argv, "usage: moerun synth --out DIR [options]", o, vm)) return 0;
  if (dtype != "float32" && dtype != "bfloat16") fail(ErrorKind::Usage, "--dtype must be float32 or bfloat16");
  m.dtype = dtype == "float32" ? DType::F32 : DType::BF16;
  try {
    m.validate("synth options");
  } catch (const Error& e) {
    throw Error(ErrorKind::Usage, e.what());
  }
  io::write_synthetic_model(out, s, quiet);
  if (!quiet)
    std::cerr << "moerun synth: " << out << ": " << m.total_params() << " parameters (" << m.expert_params()
              << " in experts), " << dtype << "\n";
  return 0;
}

}  // namespace moerun::launch

// Option parsing helpers.
#include "launch/cli.hpp"

#include <fstream>
#include <iostream>
#include <sstream>

#include "base/error.hpp"

namespace moerun::launch {

bool parse_command_line(int argc, char** argv, const std::string& usage, po::options_description& opts,
                        po::variables_map& vm, const po::positional_options_description* positional) {
  opts.add_options()("help,h", "show this help")("config", po::value<std::string>(),
                                                  "read options from FILE (lines `option = value`)");
  try {
    po::command_line_parser parser(argc, argv);
    parser.options(opts);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << opts << "\n";
      return false;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) fail(ErrorKind::Io, path, ": cannot open config file");
      po::store(po::parse_config_file(in, opts), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    fail(ErrorKind::Usage, e.what(), " (see --help)");
  }
  return true;
}

void add_model_options(po::options_description& o, io::ModelConfig& m, std::string& dtype) {
  dtype = dtype_name(m.dtype);
  o.add_options()
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
    ("dtype", po::value(&dtype)->default_value(dtype), "float32 or bfloat16");
}

void apply_model_dtype(const std::string& dtype, io::ModelConfig& m) {
  if (dtype != "float32" && dtype != "bfloat16") fail(ErrorKind::Usage, "--dtype must be float32 or bfloat16");
  m.dtype = dtype == "float32" ? DType::F32 : DType::BF16;
}

std::vector<int64_t> parse_int_list(const std::string& s, const std::string& option) {
  std::vector<int64_t> out;
  for (const std::string& part : parse_string_list(s)) {
    try {
      std::size_t pos = 0;
      out.push_back(std::stoll(part, &pos));
      if (pos != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      fail(ErrorKind::Usage, "--", option, ": \"", part, "\" is not an integer");
    }
  }
  return out;
}

std::vector<std::string> parse_string_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ','))
    if (!part.empty()) out.push_back(part);
  return out;
}

}  // namespace moerun::launch

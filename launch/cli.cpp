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

// moerun: one binary, subcommands. Every failure becomes one line on stderr and the documented exit
// code: 0 ok, 2 usage, 3 bad input, 4 I/O, 5 comm (1: internal error).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <new>

#include "base/error.hpp"
#include "comm/mpi.hpp"
#include "io/hdf5.hpp"
#include "io/hdf5_probe.hpp"
#include "launch/address_space.hpp"
#include "launch/cli.hpp"
#include "launch/environment.hpp"
#include "model/model_family.hpp"

namespace {
using namespace moerun;

// The commands, in the order --help lists them; the families and benchmarks come from their tables.
const std::vector<launch::CommandRow>& commands() {
  using namespace launch;
  static const std::vector<CommandRow> rows{
      {"infer", cmd_infer, "batch offline inference of a JSONL or OpenAI batch file of requests (with log-probs when asked)"},
      {"perplexity", cmd_perplexity, "perplexity of a text in windows; KL divergence against a saved base run"},
      {"synth", cmd_synth, "write a synthetic moe-hdf5 model"},
      {"convert", cmd_convert, "a Hugging Face checkpoint (safetensors) to moe-hdf5"},
      {"inspect", cmd_inspect, "model config, parameter counts and memory per rank"},
      {"bench", cmd_bench, "benchmarks"},
      {"affinity", cmd_affinity, "build the expert-affinity graph from routing traces (build), print it (show)"},
      {"placement", cmd_placement, "plan a placement with replicas of hot experts from routing traces (plan), its expected load (show)"}};
  return rows;
}

std::string usage() {
  std::string families;
  for (const model::ModelFamily* f : model::model_families()) families += (families.empty() ? "" : ", ") + std::string(f->name);
  std::string out =
      "moerun: distributed expert-parallel runtime for Mixture-of-Experts models\n\n"
      "usage: moerun <command> [options]      (moerun <command> --help for its options)\n\ncommands:\n";
  for (const launch::CommandRow& c : commands()) {
    out += "  " + std::string(c.name) + std::string(std::max<std::size_t>(1, 12 - std::strlen(c.name)), ' ') + c.what;
    if (!std::strcmp(c.name, "convert")) out += "; model_type " + families;
    if (!std::strcmp(c.name, "bench")) out += ": " + launch::command_names(launch::bench_kinds(), ", ");
    out += "\n";
  }
  return out +
         "\nexit codes: 0 ok, 1 internal error, 2 usage, 3 bad input, 4 I/O, 5 communication\n"
         "environment: MOERUN_LOG=warn|info|debug (default info)\n";
}

// One error line in one write: ranks that fail together share stderr, and a line written in pieces
// (the prefix, then the message) interleaved with another rank's into "moerun: error: moerun: error: ...".
void error_line(const std::string& text) {
  const std::string line = text + "\n";
  std::size_t done = 0;
  while (done < line.size()) {
    const ssize_t w = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    done += static_cast<std::size_t>(w);
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moerun;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::cout << usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::cout << "moerun 0.1.0\n";
    return 0;
  }
  // Past RLIMIT_FSIZE (ulimit -f) a write then fails with EFBIG, which every output path reports
  // (exit 4) and cleans up after, instead of the signal killing the process mid-write.
  std::signal(SIGXFSZ, SIG_IGN);
  const std::string cmd = argv[1];
  const launch::Environment env = launch::Environment::read();
  launch::apply_log_level(env);
  launch::keep_freed_memory(env);
  launch::isolate_mpi_singleton(env);
  io::h5_init();  // before any other HDF5 call
  // The HDF5 probe's child (io/hdf5_probe.hpp): no MPI, no options, its own exit codes.
  if (cmd == "__probe-hdf5") return io::hdf5_probe_main(argc - 1, argv + 1, launch::s3_from_environment({}));
  try {
    launch::fit_address_space_limit();
    for (const launch::CommandRow& c : commands())
      if (cmd == c.name) return c.run(argc - 1, argv + 1);
    error_line(str("moerun: error: unknown command \"", cmd, "\" (see moerun --help)"));
    return 2;
  } catch (const ReportedError& e) {
    comm::MpiSession::finish_after_error(true, e.exit_code());  // every rank has it; one printed it
    return e.exit_code();
  } catch (const Error& e) {
    error_line(str("moerun: error: ", e.what()));
    comm::MpiSession::finish_after_error(false, e.exit_code());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    error_line("moerun: error: out of memory");
    comm::MpiSession::finish_after_error(false, 1);
    return 1;
  } catch (const std::exception& e) {
    error_line(str("moerun: internal error: ", e.what()));
    comm::MpiSession::finish_after_error(false, 1);
    return 1;
  }
}

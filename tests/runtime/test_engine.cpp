// The Engine embedded as a program would, on three real ranks, with no CLI and no request or result
// file: requests parsed from a string, results collected in memory. The distributed run gives the
// greedy tokens of the same engine in one process; a config error names its field; set-up
// failures are agreed (every rank throws).
#include <gtest/gtest.h>

#include <mpi.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "base/error.hpp"
#include "comm/collectives.hpp"
#include "io/requests.hpp"
#include "convert/synthetic_model.hpp"
#include "runtime/batch_loop.hpp"
#include "runtime/engine.hpp"
#include "runtime/request_split.hpp"
#include "tests/test_support.hpp"

namespace moerun::runtime {
namespace {

namespace fs = std::filesystem;

class Collect final : public ResultSink {
 public:
  void result(const io::Result& r) override { out[r.id] = r.output_tokens; }
  std::map<std::string, std::vector<int32_t>> out;
};

// One model for the whole test program, in a directory every rank knows.
const std::string& model_dir() {
  static const std::string dir = [] {
    int64_t pid = comm::rank_of(MPI_COMM_WORLD) == 0 ? ::getpid() : 0;
    pid = comm::allreduce_max(pid, MPI_COMM_WORLD);
    const std::string d = (fs::temp_directory_path() / ("moerun-engine-test-" + std::to_string(pid))).string();
    if (comm::rank_of(MPI_COMM_WORLD) == 0) {
      fs::remove_all(d);
      convert::write_synthetic_model(d, moerun::testing::tiny_synth_config(2), true);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return d;
  }();
  return dir;
}

std::map<std::string, std::vector<int32_t>> run_requests(MPI_Comm comm) {
  EngineConfig cfg;
  cfg.model = model_dir();
  cfg.quiet = true;
  Engine engine(cfg, comm);
  engine.load();
  std::string text;
  for (int i = 0; i < 6; ++i)
    text += str(R"({"id": "r)", i, R"(", "prompt_tokens": [1, )", 3 + i, ", ", 7 + 2 * i, R"(], "max_new_tokens": 5})", "\n");
  const auto requests = io::parse_requests(text, "in memory", {}, {engine.model().vocab_size, engine.model().max_position}, false);
  RouterWork work;
  if (engine.is_router()) {
    const std::vector<int64_t> all{0, 1, 2, 3, 4, 5};
    work.requests = split_requests(requests, all, engine.routers())[static_cast<std::size_t>(engine.router_index())];
    work.total_requests = 6;
  }
  Collect sink;
  RoutingStats stats(engine.model(), false);
  engine.start_serving();
  const BatchLoopResult r = run_batch_loop(engine, requests, work, {}, sink, stats);
  if (engine.is_router()) {
    EXPECT_EQ(r.run.generated_tokens, 6 * 5);
  }
  const EngineReport rep = engine.report();
  if (engine.rank() == 0) {
    EXPECT_EQ(rep.ranks, comm::size_of(comm));
  }
  return sink.out;
}

TEST(Engine, EmbeddedDistributedRunGivesTheOneProcessTokens) {
  const auto distributed = run_requests(MPI_COMM_WORLD);
  if (comm::rank_of(MPI_COMM_WORLD) == 0) {
    const auto alone = run_requests(MPI_COMM_SELF);
    ASSERT_EQ(distributed.size(), 6u);
    EXPECT_EQ(distributed, alone);
    for (const auto& [id, tokens] : distributed) EXPECT_EQ(tokens.size(), 5u) << id;
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(Engine, ConfigErrorNamesTheField) {
  EngineConfig cfg;
  cfg.model = model_dir();
  cfg.micro_batches = 65;
  try {
    Engine e(cfg, MPI_COMM_SELF);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "micro_batches");
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
  }
  cfg.micro_batches = 0;
  cfg.router.load_penalty = -1;
  try {
    Engine e(cfg, MPI_COMM_SELF);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "router.load_penalty");
  }
  cfg.router.load_penalty = 0;
  cfg.option_name = [](const std::string& f) { return "<" + f + ">"; };
  cfg.routers_per_node = 0;
  const std::string msg = moerun::testing::error_of([&] { Engine e(cfg, MPI_COMM_SELF); }, ErrorKind::Usage);
  EXPECT_EQ(msg.rfind("<routers_per_node> must be >= 1", 0), 0u) << msg;
}

TEST(Engine, SetUpFailureOnAnyRankIsAgreed) {
  EngineConfig cfg;
  cfg.model = comm::rank_of(MPI_COMM_WORLD) == 2 ? model_dir() + "-missing" : model_dir();  // only rank 2 fails
  cfg.quiet = true;
  EXPECT_THROW(Engine(cfg, MPI_COMM_WORLD), Error);  // rank 2 its Io error, the others ReportedError
  MPI_Barrier(MPI_COMM_WORLD);
  if (comm::rank_of(MPI_COMM_WORLD) == 0) fs::remove_all(model_dir());
}

}  // namespace
}  // namespace moerun::runtime

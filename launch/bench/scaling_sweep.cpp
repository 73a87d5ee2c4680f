// Scaling sweep: runs the a2a or infer benchmark at each (ranks, nodes) point on a sub-communicator.
#include "launch/bench/scaling_sweep.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/error.hpp"
#include "comm/collectives.hpp"
#include "comm/mpi.hpp"
#include "comm/topology.hpp"

namespace moerun::bench {
namespace {

const std::vector<std::string> kRouterPhases{"attention", "gate", "pack", "exchange", "wait_experts", "expert_compute", "combine", "head"};
const std::vector<std::string> kHierStages{"counts", "stage1", "fences", "network", "stage3"};

struct Point {
  int ranks = 0, nodes = 0;  // nodes 0: as MPI sees them
};

std::vector<Point> points_of(const SweepConfig& cfg) {
  std::vector<int> ranks = cfg.ranks, nodes = cfg.nodes;
  std::sort(ranks.begin(), ranks.end());
  std::sort(nodes.begin(), nodes.end());
  if (nodes.empty()) nodes.push_back(0);
  std::vector<Point> out;
  for (int r : ranks)
    for (int n : nodes) out.push_back({r, n});
  return out;
}

// Why this point cannot run in this job, or "" (same answer on every rank).
std::string unrunnable(const SweepConfig& cfg, const Point& p, int job_ranks) {
  if (p.ranks > job_ranks) return str("needs ", p.ranks, " ranks, the job has ", job_ranks);
  if (p.nodes > 0 && (p.nodes > p.ranks || p.ranks % p.nodes != 0))
    return str(p.ranks, " ranks do not split into ", p.nodes, " equal nodes");
  if (cfg.bench == "a2a" && p.ranks < 2) return "an all-to-all needs 2 ranks";
  if (cfg.bench == "infer" && p.ranks == 1 && p.nodes > 1) return "one rank is one node";
  return "";
}

double per_rank_throughput(const SweepRow& r) {
  return r.bench == "a2a" ? r.algbw_gbps : r.tokens_per_s / r.ranks;
}

void set_point_threads(int ranks, bool share_host_cores) {
  // A point of R ranks gets the host's cores divided among its ranks (the idle ranks sleep); the
  // engine does the same for distributed points, this covers the one-rank point.
  if (!share_host_cores) return;
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  omp_set_num_threads(std::max(1, hw / std::max(1, std::min(ranks, hw))));
}

}  // namespace

void SweepConfig::validate() const {
  if (bench != "infer" && bench != "a2a") fail(ErrorKind::Usage, "--sweep works with bench infer and bench a2a");
  if (ranks.empty()) fail(ErrorKind::Usage, "--sweep-ranks: give at least one rank count");
  for (int r : ranks)
    if (r < 1) fail(ErrorKind::Usage, "--sweep-ranks: ", r, " is not a rank count");
  for (int n : nodes)
    if (n < 1) fail(ErrorKind::Usage, "--sweep-nodes: ", n, " is not a node count");
  if (scalings.empty()) fail(ErrorKind::Usage, "--scaling: give weak, strong or both");
  for (const auto& s : scalings)
    if (s != "weak" && s != "strong") fail(ErrorKind::Usage, "--scaling: \"", s, "\" is not weak or strong");
  if (bench == "a2a") a2a.validate();
  if (bench == "infer" && infer.batch < 1) fail(ErrorKind::Usage, "--batch must be >= 1");
}

namespace {

// The series' smallest runnable point: the reference of weak scaling's batch and strong
// scaling's bytes.
struct SeriesStart {
  int64_t ranks = 0, experts = 0;
};

// One point on `sub` (every member calls it): its rows, or no rows and the reason in *bad when its
// layout has no valid roles (the same on every member: the topology comes from allgathered data).
std::vector<SweepRow> run_point(const SweepConfig& cfg, const std::string& scaling, const Point& p, MPI_Comm sub, const std::string& dir,
                                SeriesStart& first, std::string* bad) {
  const int rpn = p.nodes ? p.ranks / p.nodes : 0;
  // a2a needs roles only for the router->expert pattern; otherwise every rank sends and receives.
  const int routers_per_node = cfg.bench == "infer"                ? cfg.infer.engine.routers_per_node
                               : cfg.a2a.patterns.front() == "m2n" ? cfg.a2a.routers_per_node
                                                                   : 0;
  comm::Topology topo;
  try {
    topo = comm::build_topology(sub, p.ranks > 1 ? routers_per_node : 0, rpn);
  } catch (const Error& e) {
    *bad = e.what();
    return {};
  }
  if (first.ranks == 0) first = {p.ranks, static_cast<int64_t>(topo.experts.size())};
  SweepRow base;
  base.bench = cfg.bench;
  base.scaling = scaling;
  base.ranks = p.ranks;
  base.nodes = topo.nodes;
  base.routers = static_cast<int>(topo.routers.size());  // one rank: router and expert both
  base.expert_ranks = static_cast<int>(topo.experts.size());
  std::vector<SweepRow> rows;
  if (cfg.bench == "infer") {
    set_point_threads(p.ranks, cfg.infer.engine.share_host_cores);
    InferBenchConfig ic = cfg.infer;
    ic.engine.ranks_per_node = rpn;
    if (scaling == "weak") ic.batch = std::max<int64_t>(1, cfg.infer.batch * base.expert_ranks / std::max<int64_t>(1, first.experts));
    const BenchRun rep = run_infer_bench_point(ic, dir, sub);
    SweepRow row = base;
    row.algo = comm::a2a_name(cfg.infer.engine.a2a);
    row.batch = ic.batch;
    row.tokens = rep.processed_tokens;
    row.seconds = rep.seconds;
    row.tokens_per_s = tokens_per_second(rep);
    if (rep.engine.phases.count("router")) row.phases = rep.engine.phases.at("router");
    rows.push_back(row);
    return rows;
  }
  A2aBenchConfig ac = cfg.a2a;
  ac.ranks_per_node = rpn;
  ac.patterns = {cfg.a2a.patterns.front()};
  int64_t bytes = cfg.a2a.min_bytes;
  if (scaling == "strong") bytes = std::max<int64_t>(4, bytes * first.ranks / p.ranks / 4 * 4);
  ac.min_bytes = ac.max_bytes = bytes;
  for (const auto& a : run_a2a_bench(ac, sub).rows) {
    SweepRow row = base;
    row.algo = a.algo;
    row.bytes_per_rank = a.bytes_per_rank;
    row.seconds = a.median_us * 1e-6;
    row.algbw_gbps = a.algbw_gbps;
    for (std::size_t i = 0; i < a.stages_us.size() && i < kHierStages.size(); ++i) row.phases[kHierStages[i]] = a.stages_us[i];
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

SweepResult run_sweep(const SweepConfig& cfg, MPI_Comm world) {
  cfg.validate();
  const int rank = comm::rank_of(world);
  SweepResult res;
  res.job_ranks = comm::size_of(world);
  std::optional<BenchDir> bench_dir;
  std::string dir;
  if (cfg.bench == "infer") {
    dir = bench_dir.emplace(cfg.infer.work_dir, world).path();
    if (rank == 0) convert::write_synthetic_model(dir + "/model", cfg.infer.model, true);
  }
  const int saved_threads = omp_get_max_threads();
  for (const std::string& scaling : cfg.scalings) {
    SeriesStart first;
    for (const Point& p : points_of(cfg)) {
      const std::string name = str(scaling, " ", p.ranks, " ranks / ", p.nodes ? str(p.nodes) : std::string("MPI"), " nodes");
      if (const std::string why = unrunnable(cfg, p, res.job_ranks); !why.empty()) {
        res.skipped.push_back(name + ": " + why);
        continue;
      }
      const bool member = rank < p.ranks;
      comm::OwnedComm sub = comm::OwnedComm::split(world, member ? 0 : MPI_UNDEFINED, rank);
      if (member) {
        std::string bad;
        for (SweepRow& row : run_point(cfg, scaling, p, sub, dir, first, &bad)) {
          if (rank != 0) continue;
          std::fprintf(stderr, "sweep: %s %s %s: %d ranks, %d nodes: %s\n", row.bench.c_str(), row.scaling.c_str(), row.algo.c_str(),
                       row.ranks, row.nodes,
                       row.bench == "a2a" ? str(row.algbw_gbps, " GB/s").c_str() : str(row.tokens_per_s, " tokens/s").c_str());
          res.rows.push_back(std::move(row));
        }
        if (!bad.empty() && rank == 0) res.skipped.push_back(name + ": " + bad);
      }
      // Rank 0 is in every point; the ranks that sat this one out learn the series' start (they hold 0).
      comm::idle_barrier(world);
      first.ranks = comm::allreduce_max(first.ranks, world);
      first.experts = comm::allreduce_max(first.experts, world);
    }
  }
  omp_set_num_threads(saved_threads);
  // Efficiency against the smallest point of each (scaling, algo) series.
  std::map<std::string, double> base_tp;
  for (auto& row : res.rows) {
    const std::string key = row.scaling + "/" + row.algo;
    if (!base_tp.count(key)) base_tp[key] = per_rank_throughput(row);
    row.efficiency = base_tp[key] > 0 ? per_rank_throughput(row) / base_tp[key] : 0;
  }
  return res;
}

std::string sweep_table(const SweepResult& r) {
  std::string s = str("# moerun scaling sweep in a job of ", r.job_ranks,
                      " ranks; efficiency = per-rank throughput / that of the series' smallest point\n");
  char buf[512];
  std::snprintf(buf, sizeof buf, "#%-6s %-7s %-6s %5s %5s %7s %7s %8s %12s %10s %12s %10s %6s\n", "bench", "scaling", "algo", "ranks",
                "nodes", "routers", "experts", "batch", "bytes/rank", "seconds", "tokens/s", "algbw GB/s", "eff");
  s += buf;
  for (const SweepRow& w : r.rows) {
    std::snprintf(buf, sizeof buf, " %-6s %-7s %-6s %5d %5d %7d %7d %8lld %12lld %10.4f %12.1f %10.3f %6.3f\n", w.bench.c_str(),
                  w.scaling.c_str(), w.algo.c_str(), w.ranks, w.nodes, w.routers, w.expert_ranks, static_cast<long long>(w.batch),
                  static_cast<long long>(w.bytes_per_rank), w.seconds, w.tokens_per_s, w.algbw_gbps, w.efficiency);
    s += buf;
  }
  for (const auto& k : r.skipped) s += "# skipped: " + k + "\n";
  return s;
}

std::string sweep_json(const SweepConfig& cfg, const SweepResult& r) {
  nlohmann::json j;
  j["bench"] = cfg.bench;
  j["job_ranks"] = r.job_ranks;
  j["skipped"] = r.skipped;
  if (cfg.bench == "a2a") j["pattern"] = cfg.a2a.patterns.front();
  nlohmann::json rows = nlohmann::json::array();
  for (const SweepRow& w : r.rows)
    rows.push_back({{"bench", w.bench},
                    {"scaling", w.scaling},
                    {"algo", w.algo},
                    {"ranks", w.ranks},
                    {"nodes", w.nodes},
                    {"routers", w.routers},
                    {"expert_ranks", w.expert_ranks},
                    {"batch", w.batch},
                    {"tokens", w.tokens},
                    {"bytes_per_rank", w.bytes_per_rank},
                    {"seconds", w.seconds},
                    {"tokens_per_s", w.tokens_per_s},
                    {"algbw_gbps", w.algbw_gbps},
                    {"efficiency", w.efficiency},
                    {"phases", w.phases}});
  j["rows"] = rows;
  return j.dump(2);
}

std::string sweep_csv(const SweepResult& r) {
  // Phase columns: the router phases (infer, seconds) or the hier stages (a2a, microseconds).
  const bool a2a = !r.rows.empty() && r.rows.front().bench == "a2a";
  const std::vector<std::string>& phases = a2a ? kHierStages : kRouterPhases;
  std::string s =
      "bench,scaling,algo,ranks,nodes,routers,expert_ranks,batch,tokens,bytes_per_rank,seconds,tokens_per_s,algbw_gbps,efficiency";
  for (const auto& p : phases) s += str(",", a2a ? "stage_us_" : "phase_s_", p);
  s += "\n";
  for (const SweepRow& w : r.rows) {
    s += str(w.bench, ",", w.scaling, ",", w.algo, ",", w.ranks, ",", w.nodes, ",", w.routers, ",", w.expert_ranks, ",", w.batch, ",",
             w.tokens, ",", w.bytes_per_rank, ",", w.seconds, ",", w.tokens_per_s, ",", w.algbw_gbps, ",", w.efficiency);
    for (const auto& p : phases) {
      auto it = w.phases.find(p);
      s += str(",", it == w.phases.end() ? 0.0 : it->second);
    }
    s += "\n";
  }
  return s;
}

}  // namespace moerun::bench

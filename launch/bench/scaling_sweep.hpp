// `moerun bench <a2a|infer> --sweep`: weak and strong scaling over rank and node counts inside one
// job. Each point runs on the first R ranks of the job (a sub-communicator, nodes virtual when
// --sweep-nodes is given, else as MPI sees them); the other ranks wait in a sleeping barrier so
// they leave the cores to the point being measured. One row per point: ranks, nodes, routers,
// throughput, phase breakdown and efficiency against the smallest point of its series.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <mpi.h>

#include "launch/bench/alltoallv_bench.hpp"
#include "launch/bench/infer_bench.hpp"

namespace moerun::bench {

struct SweepConfig {
  std::string bench = "infer";  // infer | a2a
  std::vector<int> ranks{1, 2, 4, 8};  // points above the job size are skipped (and said)
  std::vector<int> nodes;  // virtual nodes per point; empty: as MPI sees them
  std::vector<std::string> scalings{"weak", "strong"};
  // infer: cfg.batch is the batch of the smallest point; weak scaling multiplies it by the ratio
  // of expert ranks (tokens per expert rank fixed), strong scaling keeps it (total fixed).
  InferBenchConfig infer;
  // a2a: a2a.min_bytes is the size per rank of the smallest point; weak keeps it, strong divides
  // the smallest point's total among the ranks.
  A2aBenchConfig a2a;
  void validate() const;
};

struct SweepRow {
  std::string bench, scaling, algo;
  int ranks = 0, nodes = 0, routers = 0, expert_ranks = 0;
  int64_t batch = 0;  // infer
  int64_t tokens = 0;  // infer
  int64_t bytes_per_rank = 0;  // a2a
  double seconds = 0;  // infer: router loop; a2a: median exchange
  double tokens_per_s = 0;  // infer
  double algbw_gbps = 0;  // a2a (median)
  double efficiency = 0;  // per-rank throughput / that of the series' smallest point
  std::map<std::string, double> phases;  // infer: router phases (s); a2a hier: stages (us)
};

struct SweepResult {
  int job_ranks = 0;
  std::vector<SweepRow> rows;
  std::vector<std::string> skipped;  // points not run, with why
};

// Collective over `world`; the result is valid on rank 0.
SweepResult run_sweep(const SweepConfig& cfg, MPI_Comm world);
std::string sweep_table(const SweepResult& r);
std::string sweep_json(const SweepConfig& cfg, const SweepResult& r);
std::string sweep_csv(const SweepResult& r);

}  // namespace moerun::bench

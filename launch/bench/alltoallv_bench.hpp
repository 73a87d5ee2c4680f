// `moerun bench a2a`: all-to-all-v like nccl-tests. For each size per rank, each traffic pattern
// (uniform, Zipf-skewed, router->expert M:N and back N:M) and each algorithm (mpi: flat point-to-point, as
// --a2a mpi; hier; alltoallv: the library's MPI_Alltoallv), min/median/max time over --iters, algbw
// and busbw, hier/mpi ratio, and every result as a fraction of the host's memcpy bandwidth measured
// in the same run (all ranks copying at once), and an alpha-beta fit per algorithm and pattern.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "comm/exchange_select.hpp"
#include "comm/link_model.hpp"
#include "comm/topology.hpp"

namespace moerun::bench {

struct A2aBenchConfig {
  comm::TransportConfig transport;  // of hier
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = int64_t{64} << 20;
  int step_factor = 4;
  int iters = 10;
  int warmup = 2;
  double skew = 1.0;  // Zipf exponent of the skewed pattern
  std::vector<std::string> patterns{"uniform", "zipf", "m2n"};
  std::vector<std::string> algos{"mpi", "hier", "alltoallv"};
  int routers_per_node = 1;  // for m2n and n2m
  int ranks_per_node = 0;  // virtual nodes (0: from MPI)
  double timeout_s = 300;
  void validate() const;
};

struct A2aBenchRow {
  std::string algo, pattern;
  int64_t bytes_per_rank = 0;
  double min_us = 0, median_us = 0, max_us = 0;
  double algbw_gbps = 0, busbw_gbps = 0;
  // hier only: mean seconds per exchange in each stage on rank 0 (counts, stage1, fences, network, stage3)
  std::vector<double> stages_us;
};

struct A2aBenchResult {
  double memcpy_gbps = 0;
  int ranks = 0;
  int nodes = 0;
  std::vector<A2aBenchRow> rows;
};

// The alpha-beta model of each algorithm and pattern over its sizes (comm/link_model): what the
// links the ranks use cost per exchange and per byte.
struct A2aLinkFit {
  std::string algo, pattern;
  comm::LinkModel model;
};
std::vector<A2aLinkFit> a2a_link_fits(const A2aBenchResult& r);

// A `bench a2a --json` file read back (inspect --link-fit, bench infer --link-fit): the layout it
// was measured on and its fits.
struct A2aFitFile {
  int ranks = 0, nodes = 0;
  std::vector<A2aLinkFit> fits;
};
// BadInput naming `path` and the field for a file that is not one; Io when it cannot be read.
A2aFitFile read_a2a_fit_file(const std::string& path);
// `algo`'s fits for the MoE exchange's two shapes where the file has them: the dispatch's (routers
// to expert ranks, m2n) and the combine's (back, n2m; else m2n), else all-to-all (uniform); null
// where it has none of them.
struct MoeExchangeFits {
  const A2aLinkFit* dispatch = nullptr;
  const A2aLinkFit* combine = nullptr;
};
MoeExchangeFits moe_exchange_fits(const A2aFitFile& f, const std::string& algo);

// Collective; the result is valid on rank 0.
A2aBenchResult run_a2a_bench(const A2aBenchConfig& cfg, MPI_Comm world);
std::string a2a_bench_table(const A2aBenchConfig& cfg, const A2aBenchResult& r);
std::string a2a_bench_json(const A2aBenchResult& r);
std::string a2a_bench_csv(const A2aBenchResult& r);

// Bytes rank `src` sends to each rank for `pattern` with `bytes` per rank in total (deterministic).
std::vector<int64_t> a2a_pattern_counts(const std::string& pattern, int src, int64_t bytes, const comm::Topology& topo, double skew);

}  // namespace moerun::bench

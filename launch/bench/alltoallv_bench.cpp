// All-to-all benchmark.
#include "launch/bench/alltoallv_bench.hpp"

#include "base/host.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "base/aligned_buffer.hpp"
#include "base/error.hpp"
#include "comm/collectives.hpp"
#include "comm/exchange_select.hpp"
#include "comm/hierarchical_alltoallv.hpp"
#include "comm/mpi.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"

namespace moerun::bench {
using namespace moerun::comm;  // a benchmark of comm/, written in its terms
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Spreads `total` bytes over peers by weight, in 4-byte units, remainder to the heaviest.
std::vector<int64_t> spread(const std::vector<double>& w, int64_t total) {
  double sum = 0;
  for (double x : w) sum += x;
  std::vector<int64_t> out(w.size(), 0);
  if (sum <= 0) return out;
  int64_t used = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    out[i] = static_cast<int64_t>(std::floor(static_cast<double>(total / 4) * w[i] / sum)) * 4;
    used += out[i];
  }
  out[static_cast<std::size_t>(std::max_element(w.begin(), w.end()) - w.begin())] += total - used;
  return out;
}

double measure_memcpy(MPI_Comm world) {
  const std::size_t n = std::size_t{64} << 20;
  AlignedBuffer a(n), b(n);
  std::memset(a.data(), 1, n);
  std::memset(b.data(), 2, n);
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    barrier(world);
    const double t0 = now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, now() - t0);
  }
  std::vector<double> v{static_cast<double>(n) / best / 1e9};
  reduce_sum_to_root(v, world);  // report the mean per rank while all ranks copy at once
  return v[0] / size_of(world);
}

}  // namespace

void A2aBenchConfig::validate() const {
  if (min_bytes < 4 || max_bytes < min_bytes) fail(ErrorKind::Usage, "bench a2a: need 4 <= --min-bytes <= --max-bytes");
  // Each rank holds a send and a receive buffer of --max-bytes (and hier its node window): bounded
  // here, so that a typo is a usage error and not a process killed for memory.
  const int64_t mem = host_memory_bytes();
  const int64_t limit = std::min<int64_t>(int64_t{1} << 32, mem > 0 ? mem / 8 : int64_t{1} << 32);
  if (max_bytes > limit)
    fail(ErrorKind::Usage, "--max-bytes ", max_bytes, " is more than this benchmark can hold (at most ", limit,
         ": 4 GiB, or an eighth of this host's memory)");
  if (step_factor < 2) fail(ErrorKind::Usage, "--step-factor must be >= 2");
  if (iters < 1 || warmup < 0) fail(ErrorKind::Usage, "--iters must be >= 1 and --warmup >= 0");
  if (!(skew >= 0 && skew <= 100)) fail(ErrorKind::Usage, "--skew must be in [0, 100], not ", skew);
  if (!(timeout_s > 0)) fail(ErrorKind::Usage, "--comm-timeout must be > 0 seconds");
  for (const auto& p : patterns)
    if (p != "uniform" && p != "zipf" && p != "m2n" && p != "n2m")
      fail(ErrorKind::Usage, "--patterns: \"", p, "\" is not uniform, zipf, m2n or n2m");
  for (const auto& a : algos)
    if (a != "mpi" && a != "hier" && a != "alltoallv") fail(ErrorKind::Usage, "--algos: \"", a, "\" is not mpi, hier or alltoallv");
}

std::vector<int64_t> a2a_pattern_counts(const std::string& pattern, int src, int64_t bytes, const Topology& topo, double skew) {
  const int P = topo.world_size;
  std::vector<double> w(static_cast<std::size_t>(P), 0.0);
  if (pattern == "uniform") {
    std::fill(w.begin(), w.end(), 1.0);
  } else if (pattern == "zipf") {
    // Popular destinations (hot experts): rank d gets weight 1/(d+1)^s from everyone.
    for (int d = 0; d < P; ++d) w[d] = 1.0 / std::pow(d + 1.0, skew);
  } else if (pattern == "m2n") {  // routers send to expert ranks only (a dispatch)
    if (!topo.is_router(src) || topo.experts.empty()) return std::vector<int64_t>(static_cast<std::size_t>(P), 0);
    for (int e : topo.experts) w[e] = 1.0;
  } else {  // n2m: expert ranks send to routers only (a combine)
    if (topo.is_router(src) || topo.routers.empty()) return std::vector<int64_t>(static_cast<std::size_t>(P), 0);
    for (int r : topo.routers) w[r] = 1.0;
  }
  return spread(w, bytes);
}

A2aBenchResult run_a2a_bench(const A2aBenchConfig& cfg, MPI_Comm world) {
  cfg.validate();
  const int rank = rank_of(world), P = size_of(world);
  A2aBenchResult res;
  res.ranks = P;
  res.memcpy_gbps = measure_memcpy(world);
  const Topology nodes_only = build_topology(world, 0, cfg.ranks_per_node);
  res.nodes = nodes_only.nodes;
  Topology roles = nodes_only;
  if (P > 1) {
    try {
      roles = build_topology(world, cfg.routers_per_node, cfg.ranks_per_node);
    } catch (const Error&) {
      roles = nodes_only;  // m2n then degenerates to all-to-all; fine for one-rank nodes
    }
  }
  std::map<std::string, std::unique_ptr<AllToAllV>> impl;
  for (const auto& a : cfg.algos) {
    if (a == "mpi") impl[a] = std::make_unique<MpiAllToAllV>(world, cfg.timeout_s);
    if (a == "hier") impl[a] = make_alltoallv(A2aKind::Hier, world, nodes_only, cfg.timeout_s, cfg.transport);
    if (a == "alltoallv") impl[a] = std::make_unique<MpiCollectiveAllToAllV>(world, cfg.timeout_s);
  }
  AlignedBuffer send;
  for (int64_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= cfg.step_factor) {
    for (const auto& pattern : cfg.patterns) {
      const std::vector<int64_t> counts = a2a_pattern_counts(pattern, rank, bytes, roles, cfg.skew);
      int64_t total_send = 0;
      for (auto c : counts) total_send += c;
      send.resize(static_cast<std::size_t>(std::max<int64_t>(total_send, 1)));
      std::memset(send.data(), rank & 0xff, static_cast<std::size_t>(total_send));
      for (const auto& algo : cfg.algos) {
        AllToAllV& a2a = *impl[algo];
        auto* hier = dynamic_cast<HierarchicalAllToAllV*>(&a2a);
        std::vector<double> times;
        for (int it = 0; it < cfg.warmup + cfg.iters; ++it) {
          idle_barrier(world);
          // Timed: the counts exchange and the payload exchange. Untimed between them: writing the
          // payload into the transport's send buffer, as an application builds its rows in place.
          double t0 = now();
          ExchangePlan plan = a2a.plan(counts, "bench a2a");
          double elapsed = now() - t0;
          auto h = a2a.open(std::move(plan));
          if (total_send) std::memcpy(h->send_as<char>(), send.data(), static_cast<std::size_t>(total_send));
          t0 = now();
          h->post();
          h->wait();
          elapsed += now() - t0;
          std::vector<double> dt{elapsed};
          reduce_max_to_root(dt, world);  // an exchange takes as long as its slowest rank
          if (it + 1 == cfg.warmup && hier) hier->reset_stage_times();
          if (it >= cfg.warmup) times.push_back(dt[0]);
        }
        if (rank != 0) continue;
        std::sort(times.begin(), times.end());
        A2aBenchRow row;
        row.algo = algo;
        row.pattern = pattern;
        row.bytes_per_rank = bytes;
        row.min_us = times.front() * 1e6;
        row.median_us = times[times.size() / 2] * 1e6;
        row.max_us = times.back() * 1e6;
        row.algbw_gbps = static_cast<double>(bytes) / (row.median_us * 1e-6) / 1e9;
        row.busbw_gbps = row.algbw_gbps * (P - 1) / P;
        if (hier) {
          const HierStageTimes& st = hier->stage_times();
          for (double x : {st.counts, st.stage1, st.fences, st.network, st.stage3}) row.stages_us.push_back(x / cfg.iters * 1e6);
        }
        res.rows.push_back(row);
      }
    }
  }
  return res;
}

std::string a2a_bench_table(const A2aBenchConfig& cfg, const A2aBenchResult& r) {
  std::string s = str("# moerun bench a2a: ", r.ranks, " ranks on ", r.nodes, " node(s), hier inter-node transport ",
                      internode_transport(cfg.transport), ", memcpy ", r.memcpy_gbps, " GB/s per rank (all ranks copying), median of ",
                      cfg.iters, "\n");
  char buf[512];
  std::snprintf(buf, sizeof buf, "#%11s %11s %8s  %-9s %10s %10s %10s %8s %8s %7s\n", "size(B)", "count(fp32)", "pattern", "algo",
                "min(us)", "median(us)", "max(us)", "algbw", "busbw", "memcpy");
  s += buf;
  std::snprintf(buf, sizeof buf, "#%11s %11s %8s  %-9s %10s %10s %10s %8s %8s %7s\n", "", "", "", "", "", "", "", "(GB/s)", "(GB/s)",
                "(frac)");
  s += buf;
  std::vector<double> ratios;
  for (const auto& row : r.rows) {
    std::snprintf(buf, sizeof buf, " %11lld %11lld %8s  %-9s %10.1f %10.1f %10.1f %8.3f %8.3f %7.3f\n",
                  static_cast<long long>(row.bytes_per_rank), static_cast<long long>(row.bytes_per_rank / 4), row.pattern.c_str(),
                  row.algo.c_str(), row.min_us, row.median_us, row.max_us, row.algbw_gbps, row.busbw_gbps, row.algbw_gbps / r.memcpy_gbps);
    s += buf;
    if (row.algo != "hier") continue;
    for (const auto& m : r.rows)
      if (m.algo == "mpi" && m.pattern == row.pattern && m.bytes_per_rank == row.bytes_per_rank) {
        const double ratio = row.algbw_gbps / m.algbw_gbps;
        std::snprintf(
            buf, sizeof buf,
            " %11s %11s %8s  %-9s hier/mpi algbw %.3f; rank 0 stages (us): counts %.0f, copy in %.0f, fences %.0f, network %.0f, copy out %.0f\n",
            "", "", "", "", ratio, row.stages_us[0], row.stages_us[1], row.stages_us[2], row.stages_us[3], row.stages_us[4]);
        s += buf;
        if (row.bytes_per_rank >= 65536) ratios.push_back(ratio);
      }
  }
  for (const A2aLinkFit& f : a2a_link_fits(r)) {
    std::snprintf(buf, sizeof buf,
                  "# alpha-beta fit, %s %s (t = alpha + bytes per rank / bandwidth): alpha %.1f us, %.3f GB/s, largest error %.0f%%\n",
                  f.algo.c_str(), f.pattern.c_str(), f.model.alpha_us, f.model.bandwidth_gbps, 100 * f.model.max_error);
    s += buf;
  }
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    std::snprintf(buf, sizeof buf, "# verdict: median hier/mpi algbw ratio for sizes >= 64 KiB: %.3f (%s 1.0)\n", ratios[ratios.size() / 2],
                  ratios[ratios.size() / 2] >= 1.0 ? ">=" : "<");
    s += buf;
  }
  return s;
}

std::vector<A2aLinkFit> a2a_link_fits(const A2aBenchResult& r) {
  std::vector<A2aLinkFit> fits;
  for (const A2aBenchRow& row : r.rows) {
    if (std::any_of(fits.begin(), fits.end(), [&](const A2aLinkFit& f) { return f.algo == row.algo && f.pattern == row.pattern; }))
      continue;
    std::vector<std::pair<double, double>> pts;
    for (const A2aBenchRow& o : r.rows)
      if (o.algo == row.algo && o.pattern == row.pattern) pts.emplace_back(static_cast<double>(o.bytes_per_rank), o.median_us * 1e-6);
    if (pts.size() >= 2) fits.push_back({row.algo, row.pattern, comm::fit_link_model(pts)});
  }
  return fits;
}

std::string a2a_bench_json(const A2aBenchResult& r) {
  nlohmann::json j;
  j["memcpy_gbps"] = r.memcpy_gbps;
  j["ranks"] = r.ranks;
  j["nodes"] = r.nodes;
  j["rows"] = nlohmann::json::array();
  for (const auto& row : r.rows)
    j["rows"].push_back({{"algo", row.algo},
                         {"pattern", row.pattern},
                         {"bytes_per_rank", row.bytes_per_rank},
                         {"time_us", {{"min", row.min_us}, {"median", row.median_us}, {"max", row.max_us}}},
                         {"algbw_gbps", row.algbw_gbps},
                         {"busbw_gbps", row.busbw_gbps},
                         {"stages_us", row.stages_us}});
  j["fits"] = nlohmann::json::array();
  for (const A2aLinkFit& f : a2a_link_fits(r))
    j["fits"].push_back({{"algo", f.algo},
                         {"pattern", f.pattern},
                         {"alpha_us", f.model.alpha_us},
                         {"bandwidth_gbps", f.model.bandwidth_gbps},
                         {"max_error", f.model.max_error}});
  return j.dump(2);
}

namespace {
// Each fit's measured (bytes, median time) points from the file's rows, where it has them: the
// prediction follows them between the sizes measured (comm/link_model).
void read_measured_times(const nlohmann::json& j, const std::string& path, std::vector<A2aLinkFit>& fits) {
  if (!j.contains("rows")) return;
  const nlohmann::json& rows = j.at("rows");
  if (!rows.is_array()) fail(ErrorKind::BadInput, path, ": rows is ", io::json_excerpt(rows), ", not a list of rows");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json& r = rows[i];
    const bool ok = r.is_object() && r.contains("algo") && r["algo"].is_string() && r.contains("pattern") && r["pattern"].is_string() &&
                    r.contains("bytes_per_rank") && r["bytes_per_rank"].is_number() && r.contains("time_us") && r["time_us"].is_object() &&
                    r["time_us"].contains("median") && r["time_us"]["median"].is_number();
    if (!ok) fail(ErrorKind::BadInput, path, ": rows[", i, "] is not a row (algo, pattern, bytes_per_rank, time_us.median)");
    const double bytes = r["bytes_per_rank"].get<double>(), us = r["time_us"]["median"].get<double>();
    if (!(bytes >= 0 && bytes <= 1e15) || !(us > 0 && us <= 1e9))
      fail(ErrorKind::BadInput, path, ": rows[", i, "]: ", bytes, " bytes in ", us,
           " us is not a measured exchange (bytes in [0, 1e15], time in (0, 1e9] us)");
    for (A2aLinkFit& fit : fits)
      if (fit.algo == r["algo"].get<std::string>() && fit.pattern == r["pattern"].get<std::string>())
        fit.model.measured.emplace_back(bytes, us * 1e-6);
  }
  for (A2aLinkFit& fit : fits) {
    std::sort(fit.model.measured.begin(), fit.model.measured.end());
    for (std::size_t k = 1; k < fit.model.measured.size(); ++k)
      if (fit.model.measured[k].first == fit.model.measured[k - 1].first)  // the interpolation divides by their difference
        fail(ErrorKind::BadInput, path, ": rows: ", fit.algo, " ", fit.pattern, " has ", fit.model.measured[k].first,
             " bytes twice; one median per size");
  }
}

// A count the file gives: a whole number in [lo, hi] (a double cast to int wrapped 1e300 to a negative rank count).
int whole_number(double v, int lo, int hi, const std::string& path, const char* key) {
  if (!(v >= lo && v <= hi) || v != std::floor(v))
    fail(ErrorKind::BadInput, path, ": ", key, " is ", v, ", not a whole number in [", lo, ", ", hi, "]");
  return static_cast<int>(v);
}
}  // namespace

A2aFitFile read_a2a_fit_file(const std::string& path) {
  const nlohmann::json j = io::parse_json(io::read_regular_file(path, ErrorKind::Usage), path);
  auto field = [&](const nlohmann::json& o, const char* key, const std::string& where) -> const nlohmann::json& {
    if (!o.is_object() || !o.contains(key))
      fail(ErrorKind::BadInput, path, ": ", where, " has no \"", key, "\" (not a bench a2a --json file)");
    return o.at(key);
  };
  auto number = [&](const nlohmann::json& o, const char* key, const std::string& where) {
    const nlohmann::json& v = field(o, key, where);
    if (!v.is_number()) fail(ErrorKind::BadInput, path, ": ", where, ".", key, " is ", io::json_excerpt(v), ", not a number");
    return v.get<double>();
  };
  A2aFitFile f;
  f.ranks = whole_number(number(j, "ranks", "the file"), 2, 1 << 20, path, "ranks");
  f.nodes = whole_number(number(j, "nodes", "the file"), 1, f.ranks, path, "nodes");
  const nlohmann::json& fits = field(j, "fits", "the file");
  if (!fits.is_array() || fits.empty()) fail(ErrorKind::BadInput, path, ": fits is ", io::json_excerpt(fits), ", not a list of fits");
  for (std::size_t i = 0; i < fits.size(); ++i) {
    const std::string where = str("fits[", i, "]");
    A2aLinkFit fit;
    for (auto [key, out] : {std::pair{"algo", &fit.algo}, std::pair{"pattern", &fit.pattern}}) {
      const nlohmann::json& v = field(fits[i], key, where);
      if (!v.is_string()) fail(ErrorKind::BadInput, path, ": ", where, ".", key, " is ", io::json_excerpt(v), ", not a string");
      *out = v.get<std::string>();
    }
    fit.model.alpha_us = number(fits[i], "alpha_us", where);
    fit.model.bandwidth_gbps = number(fits[i], "bandwidth_gbps", where);
    fit.model.max_error = number(fits[i], "max_error", where);
    // A link of 1 MB/s to 100 TB/s, at most 10 s per exchange: anything else is not a measurement.
    if (!(fit.model.alpha_us >= 0 && fit.model.alpha_us <= 1e7) || !(fit.model.bandwidth_gbps >= 1e-3 && fit.model.bandwidth_gbps <= 1e5) ||
        !(fit.model.max_error >= 0 && fit.model.max_error <= 1e6))
      fail(ErrorKind::BadInput, path, ": ", where, ": alpha ", fit.model.alpha_us, " us, bandwidth ", fit.model.bandwidth_gbps,
           " GB/s and max_error ", fit.model.max_error,
           " are not a link (alpha in [0, 1e7] us, bandwidth in [1e-3, 1e5] GB/s, max_error in [0, 1e6])");
    f.fits.push_back(fit);
  }
  read_measured_times(j, path, f.fits);
  return f;
}

MoeExchangeFits moe_exchange_fits(const A2aFitFile& f, const std::string& algo) {
  auto first = [&](std::initializer_list<const char*> patterns) -> const A2aLinkFit* {
    for (const char* pattern : patterns)
      for (const A2aLinkFit& fit : f.fits)
        if (fit.algo == algo && fit.pattern == pattern) return &fit;
    return nullptr;
  };
  return {first({"m2n", "uniform"}), first({"n2m", "m2n", "uniform"})};
}

std::string a2a_bench_csv(const A2aBenchResult& r) {
  std::string s = "algo,pattern,bytes_per_rank,min_us,median_us,max_us,algbw_gbps,busbw_gbps,memcpy_gbps,ranks,nodes\n";
  for (const auto& row : r.rows)
    s += str(row.algo, ",", row.pattern, ",", row.bytes_per_rank, ",", row.min_us, ",", row.median_us, ",", row.max_us, ",", row.algbw_gbps,
             ",", row.busbw_gbps, ",", r.memcpy_gbps, ",", r.ranks, ",", r.nodes, "\n");
  return s;
}

}  // namespace moerun::bench

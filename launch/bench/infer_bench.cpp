// Inference benchmark.
#include "launch/bench/infer_bench.hpp"

#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/error.hpp"
#include "base/weight_dequant.hpp"
#include "base/xxh64.hpp"
#include "comm/counter_reduction.hpp"
#include "io/requests.hpp"
#include "runtime/exchange_time.hpp"
#include "runtime/request_split.hpp"
#include "runtime/routing_stats.hpp"
#include "runtime/step_batch.hpp"
#include "comm/collectives.hpp"
#include "experts/affinity_graph.hpp"
#include "experts/backend.hpp"
#include "experts/placement.hpp"
#include "comm/topology.hpp"
#include "io/affinity_file.hpp"
#include "io/routing_trace.hpp"
#include <cmath>

namespace moerun::bench {
namespace {

const std::vector<std::string> kPhases{"attention",      "gate",    "pack", "exchange", "wait_experts",
                                       "expert_compute", "combine", "head", "idle"};

}  // namespace

namespace {

// The benchmark's requests as JSON Lines, parsed in memory as `moerun infer` parses a file.
std::vector<io::Request> bench_requests(const InferBenchConfig& cfg, const model::ModelConfig& m, int64_t salt) {
  std::string text;
  for (int64_t i = 0; i < cfg.batch; ++i) {
    nlohmann::json j;
    j["id"] = str("b", i);
    std::vector<int64_t> toks(static_cast<std::size_t>(cfg.prompt_len));
    for (int64_t t = 0; t < cfg.prompt_len; ++t) toks[t] = (i * 131 + t * 17 + 1 + salt * 7919) % m.vocab_size;
    j["prompt_tokens"] = toks;
    j["max_new_tokens"] = cfg.scoring == BenchScoring::None ? cfg.new_tokens : 0;
    if (cfg.scoring != BenchScoring::None) j["prompt_logprobs"] = 0;
    text += j.dump() + "\n";
  }
  auto requests = io::parse_requests(text, "bench requests", {}, {m.vocab_size, m.max_position}, false);
  if (cfg.scoring == BenchScoring::SecondHalf)
    for (io::Request& r : requests) r.score_from = cfg.prompt_len / 2;
  return requests;
}

// The bench's results, kept only as BenchRun::outputs_digest's sum.
class OutputDigest final : public runtime::ResultSink {
 public:
  void result(const io::Result& r) override {
    Xxh64 h;
    h.text(r.id);
    for (int32_t t : r.output_tokens) h.value(t);
    sum_ += static_cast<int64_t>(h.digest() >> 32);
  }
  int64_t sum() const { return sum_; }

 private:
  int64_t sum_ = 0;
};

}  // namespace

BenchRun run_infer_bench_point(const InferBenchConfig& cfg, const std::string& dir, MPI_Comm comm, int64_t salt, const std::string& trace) {
  runtime::EngineConfig ec = cfg.engine;
  ec.model = dir + "/model";
  ec.quiet = true;
  runtime::Engine engine(ec, comm);
  engine.load();
  const std::vector<io::Request> requests = bench_requests(cfg, engine.model(), salt);
  runtime::BatchLoopConfig loop;
  loop.scheduler = cfg.scheduler;
  if (cfg.whole_batch_steps) {
    loop.scheduler.max_batch_size = std::max<int64_t>(loop.scheduler.max_batch_size, cfg.batch);
    loop.scheduler.max_batch_tokens = std::max<int64_t>(loop.scheduler.max_batch_tokens, cfg.batch * cfg.prompt_len);
  }
  loop.progress = false;
  runtime::RouterWork work;
  if (engine.is_router()) {
    std::vector<int64_t> all(requests.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    work.requests = runtime::split_requests(requests, all, engine.routers())[static_cast<std::size_t>(engine.router_index())];
    work.total_requests = static_cast<int64_t>(requests.size());
  }
  runtime::RoutingStats stats(engine.model(), !trace.empty());
  OutputDigest sink;
  engine.start_serving();
  const runtime::BatchLoopResult res = runtime::run_batch_loop(engine, requests, work, loop, sink, stats);
  if (!trace.empty() && engine.is_router()) {
    const int ri = engine.router_index();
    io::write_routing_trace(ri == 0 ? trace : trace + "." + std::to_string(ri), stats.trace());
  }
  BenchRun r;
  r.run = res.run;
  r.processed_tokens = res.processed_tokens;
  r.seconds = res.seconds;
  r.engine = engine.report();
  comm::reduce_counters_to_root(r.run, comm);
  std::vector<int64_t> digest{sink.sum()};
  comm::allreduce_sum(digest, comm);
  r.outputs_digest = digest[0];
  return r;
}

namespace {
double rate(int64_t tokens, double seconds) {
  return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
}
}  // namespace

double tokens_per_second(const BenchRun& r) {
  return r.seconds > 0 ? static_cast<double>(r.processed_tokens) / r.seconds : 0;
}

BenchDir::BenchDir(const std::string& work_dir, MPI_Comm world) : dir_(work_dir) {
  if (comm::rank_of(world) == 0 && dir_.empty()) {
    char tmpl[] = "/tmp/moerun-bench-XXXXXX";
    if (!mkdtemp(tmpl)) fail(ErrorKind::Io, "cannot create a temporary directory in /tmp");
    dir_ = tmpl;
    owned_ = true;
  }
  dir_ = comm::broadcast_string(dir_, world);
}

BenchDir::~BenchDir() {
  std::error_code ec;
  if (owned_) std::filesystem::remove_all(dir_, ec);
}

double decode_weight_bytes_per_token(const model::ModelConfig& m, WeightScheme dense) {
  // Attention and LM head in the model's dtype, or per --quantize-dense (values + fp16 scales per 32).
  const double es =
      dense == WeightScheme::Plain
          ? static_cast<double>(dtype_size(m.dtype))
          : static_cast<double>(dequant::values_bytes(dense, 1, kQuantGroup) + dequant::scales_bytes(dense, 1, kQuantGroup)) / kQuantGroup;
  const double d = static_cast<double>(m.hidden_size), q = static_cast<double>(m.num_heads * m.head_dim),
               kv = static_cast<double>(m.num_kv_heads * m.head_dim);
  const double per_layer = es * (2 * q * d + 2 * kv * d) + 4.0 * static_cast<double>(m.num_experts) * d +
                           static_cast<double>(m.top_k) * static_cast<double>(m.bytes_per_expert()) +
                           static_cast<double>(dtype_size(m.dtype)) * 3.0 * static_cast<double>(m.shared_expert_intermediate_size) * d;
  return static_cast<double>(m.num_layers) * per_layer + es * static_cast<double>(m.vocab_size) * d;
}

double stream_copy_gbps(int threads) {
  const std::size_t n = std::size_t{32} << 20;  // doubles: 256 MiB per array
  std::vector<double> a(n, 1.0), b(n, 2.0);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::size_t i = 0; i < n; ++i) b[i] = a[i];
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(n * sizeof(double)) / best / 1e9;  // STREAM counts read + write
}

InferBenchResult run_infer_bench(const InferBenchConfig& cfg, MPI_Comm world) {
  const int rank = comm::rank_of(world);
  const BenchDir bench_dir(cfg.work_dir, world);
  const std::string& dir = bench_dir.path();
  if (rank == 0) convert::write_synthetic_model(dir + "/model", cfg.model, true);
  InferBenchResult r;
  r.distributed = run_infer_bench_point(cfg, dir, world);
  r.tokens_per_s = tokens_per_second(r.distributed);
  if (comm::size_of(world) == 1 && cfg.batch == 1 && r.distributed.run.decode_seconds > 0) {
    r.copy_gbps = stream_copy_gbps(omp_get_max_threads());
    r.decode_weight_bytes_per_step = decode_weight_bytes_per_token(cfg.model.model, cfg.engine.dense_scheme);
    r.decode_stream_gbps =
        r.decode_weight_bytes_per_step * static_cast<double>(r.distributed.run.decode_tokens) / r.distributed.run.decode_seconds / 1e9;
  }
  comm::idle_barrier(world);
  if (cfg.baseline && comm::size_of(world) > 1) {
    if (rank == 0) {
      const int threads = omp_get_max_threads();
      if (cfg.engine.share_host_cores) omp_set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
      r.single = run_infer_bench_point(cfg, dir, MPI_COMM_SELF);
      r.single_tokens_per_s = tokens_per_second(r.single);
      omp_set_num_threads(threads);
    }
    comm::idle_barrier(world);
  }
  return r;
}

CacheBenchResult run_cache_bench(const InferBenchConfig& cfg, double l1_fraction, MPI_Comm world, const std::string& l1_budget_of) {
  CacheBenchResult res;
  const int rank = comm::rank_of(world), P = comm::size_of(world);
  const BenchDir bench_dir(cfg.work_dir, world);
  const std::string& dir = bench_dir.path();
  const model::ModelConfig& m = cfg.model.model;
  if (rank == 0) convert::write_synthetic_model(dir + "/model", cfg.model, true);
  comm::idle_barrier(world);
  // The affinity graph comes from another request set (salted prompts) than the one measured.
  InferBenchConfig tc = cfg;
  tc.engine.cache = {};
  tc.engine.affinity.clear();
  const std::string trace = dir + "/trace.h5";
  run_infer_bench_point(tc, dir, world, 1, trace);
  comm::idle_barrier(world);  // every router's trace is written
  if (rank == 0) {
    const std::vector<std::string> files = io::routing_trace_files(trace);  // one per router
    std::vector<io::RoutingTrace> traces;
    for (const auto& f : files) traces.push_back(io::read_routing_trace(f));
    const io::AffinityGraph g = experts::build_affinity_graph(traces, files);
    io::write_affinity_graph(dir + "/affinity.h5", g);
    res.top2_share_min = 1;
    for (int64_t l = 0; l < g.num_layers; ++l) {
      std::vector<double> f(g.frequency.begin() + l * g.num_experts, g.frequency.begin() + (l + 1) * g.num_experts);
      std::partial_sort(f.begin(), f.begin() + std::min<int64_t>(2, g.num_experts), f.end(), std::greater<>());
      const double share = (f[0] + (g.num_experts > 1 ? f[1] : 0.0)) / static_cast<double>(g.top_k);
      res.top2_share_min = std::min(res.top2_share_min, share);
      res.top2_share_max = std::max(res.top2_share_max, share);
    }
  }
  // L1 = the fraction of the experts of the rank that owns the most, under the run's placement.
  const comm::Topology topo = comm::build_topology(world, cfg.engine.routers_per_node, cfg.engine.ranks_per_node, cfg.engine.router_nodes);
  const experts::Placement placement = P > 1 && !cfg.engine.placement_file.empty()
                                           ? experts::placement_from_json(cfg.engine.placement_file, m.num_layers, m.num_experts, topo)
                                           : experts::round_robin_placement(m.num_layers, m.num_experts, topo);
  int64_t owned = 0;
  for (int r : topo.experts) owned = std::max(owned, placement.count_on(r));
  const int64_t slots = std::max<int64_t>(1, static_cast<int64_t>(std::floor(l1_fraction * static_cast<double>(owned))));
  // The L1 budget: that many experts of the model's format, or of `l1_budget_of`'s.
  model::ModelConfig budget_model = m;
  if (!l1_budget_of.empty()) {
    budget_model.dtype = l1_budget_of == "float32" ? DType::F32 : DType::BF16;
    budget_model.expert_format = model::parse_weight_format(l1_budget_of, budget_model.dtype, "--l1-budget-of");
  }
  Matmul budget_mm;
  const int64_t l1_bytes =
      slots * experts::make_expert_backend({cfg.engine.device, cfg.engine.cuda_library}, budget_model, budget_mm)->expert_bytes();
  std::vector<CacheBenchRow>& rows = res.rows;
  // lru: LRU prefetch and eviction; hotness: LRU prefetch, coldest evicted first (--warmup hotness);
  // affinity: the graph's predictions for both.
  for (const std::string mode : {"all-resident", "lru", "hotness", "affinity"}) {
    InferBenchConfig bc = cfg;
    if (mode != "all-resident") {
      bc.engine.cache.l1_bytes = l1_bytes;
      bc.engine.cache.prefetch = experts::parse_prefetch(mode == "affinity" ? "affinity" : "lru");
      bc.engine.cache.warmup = mode == "hotness" ? experts::WarmupPolicy::Hotness : experts::WarmupPolicy::None;
      bc.engine.cache.l2_dir = dir + "/l2-" + mode;
      bc.engine.affinity = mode == "affinity" ? dir + "/affinity.h5" : "";
    } else {
      bc.engine.cache = {};
      bc.engine.affinity.clear();
    }
    CacheBenchRow row;
    row.mode = mode;
    row.l1_bytes = mode == "all-resident" ? 0 : l1_bytes;
    row.report = run_infer_bench_point(bc, dir, world);
    row.tokens_per_s = tokens_per_second(row.report);
    rows.push_back(std::move(row));
    comm::idle_barrier(world);
  }
  return res;
}

std::string cache_bench_table(const InferBenchConfig& cfg, double l1_fraction, const CacheBenchResult& res) {
  const model::ModelConfig& m = cfg.model.model;
  const std::vector<CacheBenchRow>& rows = res.rows;
  std::string s =
      str("# moerun bench infer --cache-compare: ", rows.front().report.engine.ranks, " rank(s), model ", m.num_layers, " layers x ",
          m.num_experts, " experts of ", io::expert_raw_bytes(m) >> 10, " KiB, gate skew ", cfg.model.gate_skew, "; L1 = ", l1_fraction,
          " of a rank's experts", rows.back().l1_bytes > 0 ? str(" (", rows.back().l1_bytes >> 20, " MiB)") : std::string(),
          ", L2 on local disk (", cfg.engine.cache.l2_direct ? "O_DIRECT" : "buffered", " reads), ", cfg.engine.cache.io_threads,
          " I/O threads per rank; experts ", m.expert_format.name(), "; batch ", cfg.batch, ", prompt ", cfg.prompt_len, ", new ",
          cfg.new_tokens, "\n# skew: the two busiest experts of a layer take ", res.top2_share_min, "-", res.top2_share_max,
          " of its routed slots (trace run)\n");
  char buf[256];
  std::snprintf(buf, sizeof buf, "#%-12s %10s %8s %8s %8s %9s %9s %8s %8s %7s %7s %7s %7s %9s\n", "mode", "tokens/s", "ratio", "L1 hit",
                "L2 hit", "stall(s)", "precision", "recall", "L3 MiB", "loads", "read_ms", "hash_ms", "pack_ms", "same out");
  s += buf;
  const double base = rows.front().tokens_per_s;
  for (const auto& r : rows) {
    const auto& c = r.report.engine.cache;
    // Per-load means of the I/O threads' time: reading (L2 or L3), checksums, packing.
    const int64_t loads = c.l2_hits + c.l3_reads;
    const double per = loads > 0 ? 1e3 / static_cast<double>(loads) : 0.0;
    std::snprintf(buf, sizeof buf, " %-12s %10.1f %8.3f %8.3f %8.3f %9.3f %9.3f %8.3f %8lld %7lld %7.3f %7.3f %7.3f %9s\n", r.mode.c_str(),
                  r.tokens_per_s, base > 0 ? r.tokens_per_s / base : 0.0, r.report.engine.cache_on ? c.l1_hit_rate() : 1.0, c.l2_hit_rate(),
                  c.stall_s, c.prefetch_precision(), c.prefetch_recall(), static_cast<long long>(c.l3_bytes_read >> 20),
                  static_cast<long long>(loads), c.read_s * per, c.verify_s * per, c.pack_s * per,
                  r.report.outputs_digest == rows.front().report.outputs_digest ? "yes" : "NO");
    s += buf;
  }
  s += "# same out: every request's output tokens equal the all-resident run's\n";
  return s;
}

std::string cache_bench_json(const InferBenchConfig& cfg, double l1_fraction, const CacheBenchResult& res) {
  const std::vector<CacheBenchRow>& rows = res.rows;
  nlohmann::json j;
  j["top2_share"] = {{"min", res.top2_share_min}, {"max", res.top2_share_max}};
  j["l1_fraction"] = l1_fraction;
  j["expert_format"] = cfg.model.model.expert_format.name();
  j["gate_skew"] = cfg.model.gate_skew;
  j["batch"] = cfg.batch;
  nlohmann::json arr = nlohmann::json::array();
  const double base = rows.front().tokens_per_s;
  for (const auto& r : rows) {
    const auto& c = r.report.engine.cache;
    arr.push_back({{"mode", r.mode},
                   {"tokens_per_s", r.tokens_per_s},
                   {"ratio_vs_all_resident", base > 0 ? r.tokens_per_s / base : 0.0},
                   {"l1_hit_rate", r.report.engine.cache_on ? c.l1_hit_rate() : 1.0},
                   {"l2_hit_rate", c.l2_hit_rate()},
                   {"stall_s", c.stall_s},
                   {"prefetch_precision", c.prefetch_precision()},
                   {"prefetch_recall", c.prefetch_recall()},
                   {"l3_bytes_read", c.l3_bytes_read},
                   {"loads", c.l2_hits + c.l3_reads},
                   {"read_s", c.read_s},
                   {"verify_s", c.verify_s},
                   {"pack_s", c.pack_s},
                   {"l1_bytes", r.l1_bytes},
                   {"outputs_equal_all_resident", r.report.outputs_digest == rows.front().report.outputs_digest}});
  }
  j["rows"] = arr;
  return j.dump(2);
}

namespace {
// --link-fit: the routers' time in the exchanges against the fit's prediction for the same steps.
struct ExchangeCheck {
  MoeExchangeFits fit;  // fit.dispatch null: no prediction
  double measured_s = 0;  // the routers' exchange + wait for results, less the expert ranks' compute and packing
  double predicted_s = 0;  // the run's steps at the fit: one prefill step (the whole batch) and the decode steps
  double decode_step_s = 0;  // the prediction for one decode step
  int64_t measured_pairs = 0, predicted_pairs = 0;
};

ExchangeCheck check_exchange(const InferBenchConfig& cfg, const InferBenchResult& r) {
  ExchangeCheck x;
  const runtime::EngineReport& e = r.distributed.engine;
  if (cfg.link_fit_path.empty() || e.moe_exchanges == 0) return x;
  x.fit = moe_exchange_fits(cfg.link_fit, comm::a2a_name(cfg.engine.a2a));
  if (!x.fit.dispatch) return x;
  auto phase = [&](const char* role, const char* name) {
    const auto it = e.phases.find(role);
    return it != e.phases.end() && it->second.count(name) ? it->second.at(name) : 0.0;
  };
  x.measured_s =
      phase("router", "exchange") + phase("router", "wait_experts") - phase("expert", "expert_compute") - phase("expert", "pack");
  x.measured_pairs = e.moe_exchanges;
  const int64_t tokens = (cfg.batch + e.routers - 1) / e.routers;  // the busiest router's sequences
  // The step's micro-batches follow its sequences, not its tokens: a lone prompt runs in one.
  const int64_t mb = runtime::step_micro_batches(cfg.engine.micro_batches > 0 ? cfg.engine.micro_batches : 2, tokens > 1);
  const runtime::StepExchange prefill = runtime::step_exchange(cfg.model.model, tokens * cfg.prompt_len, mb);
  const runtime::StepExchange decode = runtime::step_exchange(cfg.model.model, tokens, mb);
  const int64_t decode_steps = std::max<int64_t>(cfg.new_tokens - 1, 0);
  const comm::LinkModel &out = x.fit.dispatch->model, &back = x.fit.combine->model;
  x.decode_step_s = runtime::step_exchange_seconds(decode, out, back);
  x.predicted_s = runtime::step_exchange_seconds(prefill, out, back) + static_cast<double>(decode_steps) * x.decode_step_s;
  x.predicted_pairs = prefill.exchanges + decode_steps * decode.exchanges;
  return x;
}
}  // namespace

std::string infer_bench_table(const InferBenchConfig& cfg, const InferBenchResult& r) {
  const model::ModelConfig& m = cfg.model.model;
  const BenchRun& d = r.distributed;
  const runtime::EngineReport& de = d.engine;
  std::string s = str("# moerun bench infer: ", de.ranks, " rank(s) (", de.routers, " router(s), ",
                      de.ranks - de.routers > 0 ? de.ranks - de.routers : 1, " expert rank(s)), model ", m.num_layers, " layers, hidden ",
                      m.hidden_size, ", ", m.num_experts, " experts x ", m.intermediate_size, " top-", m.top_k, " ", dtype_name(m.dtype),
                      "; batch ", cfg.batch, ", prompt ", cfg.prompt_len, ", new ", cfg.new_tokens, ", micro-batches ",
                      cfg.engine.micro_batches ? std::to_string(cfg.engine.micro_batches) : std::string("auto"), "\n");
  char buf[512];
  std::snprintf(buf, sizeof buf, "#%-7s", "role");
  s += buf;
  for (const auto& p : kPhases) {
    std::snprintf(buf, sizeof buf, " %14s", p.c_str());
    s += buf;
  }
  s += "   (seconds, max over the ranks of the role)\n";
  for (const auto& [role, phases] : de.phases) {
    std::snprintf(buf, sizeof buf, " %-7s", role.c_str());
    s += buf;
    for (const auto& p : kPhases) {
      auto it = phases.find(p);
      std::snprintf(buf, sizeof buf, " %14.4f", it == phases.end() ? 0.0 : it->second);
      s += buf;
    }
    s += "\n";
  }
  std::snprintf(buf, sizeof buf, "# router loop %.3f s, %lld tokens, %.1f tokens/s\n", d.seconds,
                static_cast<long long>(d.processed_tokens), r.tokens_per_s);
  s += buf;
  std::snprintf(buf, sizeof buf, "# prefill %lld tokens in %.3f s: %.1f tokens/s; decode %lld tokens in %.3f s: %.1f tokens/s\n",
                static_cast<long long>(d.run.prefill_tokens), d.run.prefill_seconds, rate(d.run.prefill_tokens, d.run.prefill_seconds),
                static_cast<long long>(d.run.decode_tokens), d.run.decode_seconds, rate(d.run.decode_tokens, d.run.decode_seconds));
  s += buf;
  if (r.decode_stream_gbps > 0) {
    std::snprintf(buf, sizeof buf,
                  "# decode streams %.1f MB of weights per token: %.1f GB/s, %.2f of this machine's copy bandwidth (%.1f GB/s)\n",
                  r.decode_weight_bytes_per_step / 1e6, r.decode_stream_gbps, r.decode_stream_gbps / r.copy_gbps, r.copy_gbps);
    s += buf;
  }
  if (r.single_tokens_per_s > 0) {
    std::snprintf(buf, sizeof buf, "# single process (rank 0 alone, same job): %.1f tokens/s; ratio distributed/single %.3f\n",
                  r.single_tokens_per_s, r.tokens_per_s / r.single_tokens_per_s);
    s += buf;
  }
  if (de.phases.count("router") && de.phases.at("router").count("exchange")) {
    const auto& rp = de.phases.at("router");
    const double ex = rp.at("exchange");
    std::snprintf(buf, sizeof buf, "# exchange (counts + rows out) is %.1f%% of the router's loop; waiting for expert results %.1f%%\n",
                  100 * ex / d.seconds, 100 * (rp.count("wait_experts") ? rp.at("wait_experts") : 0) / d.seconds);
    s += buf;
  }
  if (const ExchangeCheck x = check_exchange(cfg, r); x.fit.dispatch) {
    std::snprintf(
        buf, sizeof buf,
        "# exchange against --link-fit %s (%s: dispatch by the %s fit, combine by the %s fit): measured %.2f ms in %lld dispatch + combine pairs "
        "(the routers' exchange and wait for results, less the expert ranks' compute and packing), predicted %.2f ms in %lld: "
        "measured/predicted %.2f; a decode step predicted %.3f ms\n",
        cfg.link_fit_path.c_str(), x.fit.dispatch->algo.c_str(), x.fit.dispatch->pattern.c_str(), x.fit.combine->pattern.c_str(),
        1e3 * x.measured_s, static_cast<long long>(x.measured_pairs), 1e3 * x.predicted_s, static_cast<long long>(x.predicted_pairs),
        x.measured_s / x.predicted_s, 1e3 * x.decode_step_s);
    s += buf;
  } else if (!cfg.link_fit_path.empty()) {
    s += str("# --link-fit ", cfg.link_fit_path, ": no exchange in this run to compare (one process)\n");
  }
  return s;
}

std::string infer_bench_json(const InferBenchConfig& cfg, const InferBenchResult& r) {
  nlohmann::json j;
  j["tokens_per_s"] = r.tokens_per_s;
  j["ranks"] = r.distributed.engine.ranks;
  j["routers"] = r.distributed.engine.routers;
  j["seconds"] = r.distributed.seconds;
  j["tokens"] = r.distributed.processed_tokens;
  const runtime::ThroughputCounters& t = r.distributed.run;
  j["prefill"] = {
      {"tokens", t.prefill_tokens}, {"seconds", t.prefill_seconds}, {"tokens_per_s", rate(t.prefill_tokens, t.prefill_seconds)}};
  j["decode"] = {{"tokens", t.decode_tokens}, {"seconds", t.decode_seconds}, {"tokens_per_s", rate(t.decode_tokens, t.decode_seconds)}};
  j["phases"] = r.distributed.engine.phases;
  j["single_process_tokens_per_s"] = r.single_tokens_per_s;
  j["ratio_vs_single_process"] = r.single_tokens_per_s > 0 ? r.tokens_per_s / r.single_tokens_per_s : 0.0;
  j["batch"] = cfg.batch;
  j["hidden"] = cfg.model.model.hidden_size;
  j["micro_batches"] = cfg.engine.micro_batches;
  j["moe_exchanges"] = r.distributed.engine.moe_exchanges;  // dispatch + combine pairs of the busiest router
  if (const ExchangeCheck x = check_exchange(cfg, r); x.fit.dispatch)
    j["link_fit"] = {{"file", cfg.link_fit_path},
                     {"algo", x.fit.dispatch->algo},
                     {"dispatch_pattern", x.fit.dispatch->pattern},
                     {"combine_pattern", x.fit.combine->pattern},
                     {"measured_s", x.measured_s},
                     {"predicted_s", x.predicted_s},
                     {"measured_pairs", x.measured_pairs},
                     {"predicted_pairs", x.predicted_pairs},
                     {"decode_step_predicted_s", x.decode_step_s}};
  if (r.decode_stream_gbps > 0) {
    j["copy_gbps"] = r.copy_gbps;
    j["decode_weight_bytes_per_step"] = r.decode_weight_bytes_per_step;
    j["decode_stream_gbps"] = r.decode_stream_gbps;
    j["decode_stream_fraction"] = r.decode_stream_gbps / r.copy_gbps;
  }
  return j.dump(2);
}

}  // namespace moerun::bench

// Inference benchmark.
#include "runtime/infer_bench.hpp"

#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/error.hpp"
#include "comm/collectives.hpp"

namespace moerun::runtime {
namespace {

const std::vector<std::string> kPhases{"attention", "gate", "pack", "exchange", "wait_experts", "expert_compute",
                                       "combine", "head", "idle"};

}  // namespace

void write_bench_requests(const std::string& path, int64_t batch, int64_t prompt_len, int64_t new_tokens, int64_t vocab) {
  std::ofstream req(path);
  for (int64_t i = 0; i < batch; ++i) {
    nlohmann::json j;
    j["id"] = str("b", i);
    std::vector<int64_t> toks(static_cast<std::size_t>(prompt_len));
    for (int64_t t = 0; t < prompt_len; ++t) toks[t] = (i * 131 + t * 17 + 1) % vocab;
    j["prompt_tokens"] = toks;
    j["max_new_tokens"] = new_tokens;
    req << j.dump() << '\n';
  }
  if (!req.flush()) fail(ErrorKind::Io, path, ": cannot write the benchmark requests");
}

InferReport run_infer_bench_point(const InferBenchConfig& cfg, const std::string& dir, MPI_Comm comm) {
  InferConfig ic = cfg.infer;
  ic.model_dir = dir + "/model";
  ic.input = dir + "/requests.jsonl";
  ic.output = dir + "/out.jsonl";
  ic.quiet = true;
  ic.scheduler.max_batch_size = std::max<int64_t>(ic.scheduler.max_batch_size, cfg.batch);
  ic.scheduler.max_batch_tokens = std::max<int64_t>(ic.scheduler.max_batch_tokens, cfg.batch * cfg.prompt_len);
  if (comm::rank_of(comm) == 0)
    write_bench_requests(ic.input, cfg.batch, cfg.prompt_len, cfg.new_tokens, cfg.model.model.vocab_size);
  comm::idle_barrier(comm);  // the files exist before any rank reads them
  return run_infer(ic, comm);
}

double tokens_per_second(const InferReport& r) {
  return r.seconds > 0 ? static_cast<double>(r.processed_tokens) / r.seconds : 0;
}

std::string make_bench_dir(const std::string& work_dir, MPI_Comm world) {
  std::string dir = work_dir;
  if (comm::rank_of(world) == 0 && dir.empty()) {
    char tmpl[] = "/tmp/moerun-bench-XXXXXX";
    if (!mkdtemp(tmpl)) fail(ErrorKind::Io, "cannot create a temporary directory in /tmp");
    dir = tmpl;
  }
  return comm::broadcast_string(dir, world);
}

InferBenchResult run_infer_bench(const InferBenchConfig& cfg, MPI_Comm world) {
  const int rank = comm::rank_of(world);
  const std::string dir = make_bench_dir(cfg.work_dir, world);
  if (rank == 0) io::write_synthetic_model(dir + "/model", cfg.model, true);
  InferBenchResult r;
  r.distributed = run_infer_bench_point(cfg, dir, world);
  r.tokens_per_s = tokens_per_second(r.distributed);
  comm::idle_barrier(world);
  if (cfg.baseline && comm::size_of(world) > 1) {
    if (rank == 0) {
      const int threads = omp_get_max_threads();
      if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
      r.single = run_infer_bench_point(cfg, dir, MPI_COMM_SELF);
      r.single_tokens_per_s = tokens_per_second(r.single);
      omp_set_num_threads(threads);
    }
    comm::idle_barrier(world);
  }
  if (rank == 0 && cfg.work_dir.empty()) std::filesystem::remove_all(dir);
  return r;
}

std::string infer_bench_table(const InferBenchConfig& cfg, const InferBenchResult& r) {
  const io::ModelConfig& m = cfg.model.model;
  const InferReport& d = r.distributed;
  std::string s = str("# moerun bench infer: ", d.ranks, " rank(s) (", d.routers, " router(s), ", d.ranks - d.routers > 0 ? d.ranks - d.routers : 1,
                      " expert rank(s)), model ", m.num_layers, " layers, hidden ", m.hidden_size, ", ", m.num_experts,
                      " experts x ", m.intermediate_size, " top-", m.top_k, " ", dtype_name(m.dtype), "; batch ", cfg.batch,
                      ", prompt ", cfg.prompt_len, ", new ", cfg.new_tokens, ", micro-batches ", cfg.infer.micro_batches, "\n");
  char buf[512];
  std::snprintf(buf, sizeof buf, "#%-7s", "role");
  s += buf;
  for (const auto& p : kPhases) {
    std::snprintf(buf, sizeof buf, " %14s", p.c_str());
    s += buf;
  }
  s += "   (seconds, max over the ranks of the role)\n";
  for (const auto& [role, phases] : d.phases) {
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
  if (r.single_tokens_per_s > 0) {
    std::snprintf(buf, sizeof buf, "# single process (rank 0 alone, same job): %.1f tokens/s; ratio distributed/single %.3f\n",
                  r.single_tokens_per_s, r.tokens_per_s / r.single_tokens_per_s);
    s += buf;
  }
  if (d.phases.count("router") && d.phases.at("router").count("exchange")) {
    const auto& rp = d.phases.at("router");
    const double ex = rp.at("exchange");
    std::snprintf(buf, sizeof buf, "# exchange (counts + rows out) is %.1f%% of the router's loop; waiting for expert results %.1f%%\n",
                  100 * ex / d.seconds, 100 * (rp.count("wait_experts") ? rp.at("wait_experts") : 0) / d.seconds);
    s += buf;
  }
  return s;
}

std::string infer_bench_json(const InferBenchConfig& cfg, const InferBenchResult& r) {
  nlohmann::json j;
  j["tokens_per_s"] = r.tokens_per_s;
  j["ranks"] = r.distributed.ranks;
  j["routers"] = r.distributed.routers;
  j["seconds"] = r.distributed.seconds;
  j["tokens"] = r.distributed.processed_tokens;
  j["phases"] = r.distributed.phases;
  j["single_process_tokens_per_s"] = r.single_tokens_per_s;
  j["ratio_vs_single_process"] = r.single_tokens_per_s > 0 ? r.tokens_per_s / r.single_tokens_per_s : 0.0;
  j["batch"] = cfg.batch;
  j["hidden"] = cfg.model.model.hidden_size;
  j["micro_batches"] = cfg.infer.micro_batches;
  return j.dump(2);
}

}  // namespace moerun::runtime

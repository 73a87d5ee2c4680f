// MoE layer benchmark.
#include "launch/bench/layer_bench.hpp"

#include "base/host.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "base/error.hpp"
#include "base/matmul.hpp"
#include "base/swiglu_ffn.hpp"
#include "experts/cpu/expert_packing.hpp"
#include "experts/resident_experts.hpp"
#include "convert/synthetic_model.hpp"
#include "router/gate.hpp"
#include "runtime/moe_layer.hpp"

namespace moerun::bench {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A random [rows, cols] matrix in `dt`, written at `out`.
void random_matrix(uint64_t seed, const std::string& name, int64_t rows, int64_t cols, DType dt, void* out) {
  auto v = convert::synth_tensor(seed, name, rows * cols, 1.0f / std::sqrt(static_cast<float>(cols)));
  if (dt == DType::F32)
    std::copy(v.begin(), v.end(), static_cast<float*>(out));
  else
    f32_to_bf16(v.data(), static_cast<uint16_t*>(out), v.size());
}

WeightMatrix random_matrix(uint64_t seed, const std::string& name, int64_t rows, int64_t cols, DType dt) {
  WeightMatrix m;
  m.allocate(dt, rows, cols);
  random_matrix(seed, name, rows, cols, dt, m.data.data());
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void LayerBenchConfig::validate() const {
  if (hidden < 1 || experts < 1 || intermediate < 1 || top_k < 1 || top_k > experts || shared < 0 || shared > (1 << 18))
    fail(ErrorKind::Usage, "bench layer: sizes must be positive and --top-k <= --experts");
  if (hidden > (1 << 16) || intermediate > (1 << 18) || experts > 1024)
    fail(ErrorKind::Usage, "bench layer: at most --hidden 65536, --intermediate 262144, --experts 1024");
  if (tokens.empty() || dtypes.empty()) fail(ErrorKind::Usage, "bench layer: --tokens and --dtype need values");
  for (int64_t t : tokens)
    if (t < 1 || t > (1 << 20)) fail(ErrorKind::Usage, "--tokens: ", t, " is not in [1, 1048576]");
  if (iters < 1 || warmup < 0) fail(ErrorKind::Usage, "--iters must be >= 1 and --warmup >= 0");
  const int64_t weights = 3 * hidden * intermediate * experts * 4, mem = host_memory_bytes();
  if (mem > 0 && weights > mem / 2)
    fail(ErrorKind::Usage, "bench layer: the experts take ", weights >> 20, " MiB, more than half this host's ", mem >> 20, " MiB");
}

std::vector<LayerBenchRow> run_layer_bench(const LayerBenchConfig& cfg) {
  cfg.validate();
  std::vector<LayerBenchRow> rows;
  Matmul mm;
  const int64_t d = cfg.hidden, ff = cfg.intermediate, E = cfg.experts, k = cfg.top_k;
  for (DType dt : cfg.dtypes) {
    model::ModelConfig mc;
    mc.hidden_size = d;
    mc.intermediate_size = ff;
    mc.num_experts = E;
    mc.dtype = dt;
    const auto backend = experts::make_expert_backend(cfg.backend, mc, mm);
    experts::BackendTiming* timing = backend->timing();
    if (!timing) fail(ErrorKind::Usage, "bench layer: the ", experts::device_name(cfg.backend.device), " backend has no timing interface");
    experts::ResidentExperts store(*backend, E);
    AlignedBuffer raw(io::expert_raw_bytes(mc));  // w1‖w3‖w2 as a shard stores them
    const std::size_t each = raw.size() / 3;
    for (int64_t e = 0; e < E; ++e) {
      random_matrix(cfg.seed, "w1/" + std::to_string(e), ff, d, dt, raw.as<char>());
      random_matrix(cfg.seed, "w3/" + std::to_string(e), ff, d, dt, raw.as<char>() + each);
      random_matrix(cfg.seed, "w2/" + std::to_string(e), d, ff, dt, raw.as<char>() + 2 * each);
      std::unique_ptr<experts::ResidentExpert> w = backend->allocate_expert();
      backend->load_expert(raw.data(), *w);
      store.insert(0, e, std::move(w));
    }
    WeightMatrix gate = random_matrix(cfg.seed, "gate", E, d, DType::F32);
    // The shared expert, as the router holds it (packed like the other dense matrices).
    FfnWeights shared;
    FfnScratch shared_scratch;
    if (cfg.shared > 0) {
      shared.w1 = random_matrix(cfg.seed, "shared/w1", cfg.shared, d, dt);
      shared.w3 = random_matrix(cfg.seed, "shared/w3", cfg.shared, d, dt);
      shared.w2 = random_matrix(cfg.seed, "shared/w2", d, cfg.shared, dt);
      pack_ffn(mm, shared);
    }
    for (int64_t T : cfg.tokens) {
      auto x = convert::synth_tensor(cfg.seed, "x", T * d, 1.0f);
      std::vector<float> out(static_cast<std::size_t>(T * d));
      std::vector<uint8_t> prefill(static_cast<std::size_t>(T), 1);
      router::RouterConfig rc;
      runtime::LocalMoeLayer layer(*backend, store, d, E);
      std::vector<double> lt, gt, pt, et, ct, mt, xt, st;
      std::vector<float> shared_out(cfg.shared > 0 ? out.size() : 0);
      // The layer and the baseline are timed in separate loops so neither evicts the other's
      // weights from cache between iterations.
      for (int it = 0; it < cfg.warmup + cfg.iters; ++it) {
        const runtime::MoePhaseTimes before = layer.times();
        const double copied = timing->copy_seconds();
        double t0 = now();
        router::RoutingDecision r = router::route(mm, x.data(), T, gate, k, rc, prefill);
        double t1 = now();
        layer.start(0, 0, x.data(), T, r);
        double ts = now();
        if (cfg.shared > 0) swiglu_ffn_forward(mm, x.data(), T, shared, shared_out.data(), shared_scratch);
        ts = now() - ts;
        layer.finish(0, out.data());
        double t2 = now();
        if (it < cfg.warmup) continue;
        lt.push_back(t2 - t0);
        st.push_back(ts);
        gt.push_back(t1 - t0);
        pt.push_back(layer.times().pack - before.pack);
        et.push_back(layer.times().experts - before.experts);
        ct.push_back(layer.times().combine - before.combine);
        xt.push_back(timing->copy_seconds() - copied);
      }
      // Baseline: the same expert FLOPs as one matmul [T*k, d] x [d, 3ff] on the backend's GEMM
      // (and the shared expert's as one [T, d] x [d, 3 shared], added).
      mt = timing->dense_matmul_seconds(T * k, 3 * ff, d, cfg.warmup, cfg.iters);
      if (cfg.shared > 0) {
        const std::vector<double> sm = timing->dense_matmul_seconds(T, 3 * cfg.shared, d, cfg.warmup, cfg.iters);
        for (std::size_t i = 0; i < mt.size(); ++i) mt[i] += sm[i];
      }
      LayerBenchRow row;
      row.dtype = dt;
      row.tokens = T;
      row.layer_s = median(lt);
      row.matmul_s = median(mt);
      const double expert_flops = 2.0 * static_cast<double>(T * k) * static_cast<double>(d) * static_cast<double>(3 * ff) +
                                  2.0 * static_cast<double>(T) * static_cast<double>(d) * static_cast<double>(3 * cfg.shared);
      const double gate_flops = 2.0 * static_cast<double>(T * d * E);
      row.layer_gflops = (expert_flops + gate_flops) / row.layer_s * 1e-9;
      row.matmul_gflops = expert_flops / row.matmul_s * 1e-9;
      row.ratio = row.layer_gflops / row.matmul_gflops;
      row.gate_s = median(gt);
      row.permute_s = median(pt);
      row.copy_s = median(xt);
      row.experts_s = median(et);
      row.combine_s = median(ct);
      row.shared_s = median(st);
      rows.push_back(row);
    }
  }
  return rows;
}

std::string layer_bench_table(const LayerBenchConfig& cfg, const std::vector<LayerBenchRow>& rows) {
  std::string s =
      str("# moerun bench layer: hidden ", cfg.hidden, ", ", cfg.experts, " experts of intermediate ", cfg.intermediate, ", top-",
          cfg.top_k, cfg.shared > 0 ? str(", a shared expert of ", cfg.shared) : "", ", device ", experts::device_name(cfg.backend.device),
          ", isa ", Matmul::isa_name(), ", ", omp_get_max_threads(), " threads, median of ", cfg.iters, "\n");
  char buf[256];
  std::snprintf(buf, sizeof buf, "#%6s %7s %10s %10s %9s %9s %9s %9s %9s %10s %10s %7s\n", "dtype", "tokens", "layer(ms)", "layer",
                "gate(ms)", "perm(ms)", "comb(ms)", "copy(ms)", "shrd(ms)", "matmul(ms)", "matmul", "ratio");
  s += buf;
  std::snprintf(buf, sizeof buf, "#%6s %7s %10s %10s %9s %9s %9s %9s %9s %10s %10s %7s\n", "", "", "", "(GFLOP/s)", "", "", "", "", "", "",
                "(GFLOP/s)", "");
  s += buf;
  bool pass = true;
  const double target = cfg.backend.device == experts::DeviceKind::Cuda ? 0.6 : 0.8;
  const int64_t largest = *std::max_element(cfg.tokens.begin(), cfg.tokens.end());
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, " %6s %7lld %10.3f %10.1f %9.3f %9.3f %9.3f %9.3f %9.3f %10.3f %10.1f %7.3f\n",
                  r.dtype == DType::F32 ? "fp32" : "bf16", static_cast<long long>(r.tokens), r.layer_s * 1e3, r.layer_gflops,
                  r.gate_s * 1e3, r.permute_s * 1e3, r.combine_s * 1e3, r.copy_s * 1e3, r.shared_s * 1e3, r.matmul_s * 1e3, r.matmul_gflops,
                  r.ratio);
    s += buf;
    if (r.tokens == largest && r.ratio < target) pass = false;
  }
  s += str("# verdict: layer/matmul ratio at ", largest, " tokens ", pass ? ">= " : "< ", target,
           pass ? " for every dtype: PASS" : ": BELOW TARGET", "\n");
  return s;
}

std::string layer_bench_json(const LayerBenchConfig& cfg, const std::vector<LayerBenchRow>& rows) {
  nlohmann::json j;
  j["hidden"] = cfg.hidden;
  j["experts"] = cfg.experts;
  j["intermediate"] = cfg.intermediate;
  j["top_k"] = cfg.top_k;
  j["shared"] = cfg.shared;
  j["isa"] = Matmul::isa_name();
  j["device"] = experts::device_name(cfg.backend.device);
  j["threads"] = omp_get_max_threads();
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    j["rows"].push_back({{"dtype", r.dtype == DType::F32 ? "fp32" : "bf16"},
                         {"tokens", r.tokens},
                         {"layer_s", r.layer_s},
                         {"layer_gflops", r.layer_gflops},
                         {"matmul_s", r.matmul_s},
                         {"matmul_gflops", r.matmul_gflops},
                         {"ratio", r.ratio},
                         {"phases_s",
                          {{"gate", r.gate_s},
                           {"permute", r.permute_s},
                           {"experts", r.experts_s},
                           {"copy", r.copy_s},
                           {"combine", r.combine_s},
                           {"shared_expert", r.shared_s}}}});
  }
  return j.dump(2);
}

}  // namespace moerun::bench

// Gated DeltaNet mixer benchmark.
#include "launch/bench/deltanet_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "base/error.hpp"
#include "convert/synthetic_model.hpp"

namespace moerun::bench {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One layer's mixer inputs for n tokens, as the projections would give them (random, seeded).
struct MixerInputs {
  std::vector<float> qkv, z, a, b, conv_w, A_log, dt_bias, norm_w;
  MixerInputs(const runtime::DeltaNetShape& s, int64_t n)
      : qkv(convert::synth_tensor(1, "qkv", n * s.conv_channels(), 1.0f)),
        z(convert::synth_tensor(2, "z", n * s.v_heads * s.v_dim, 1.0f)),
        a(convert::synth_tensor(3, "a", n * s.v_heads, 1.0f)),
        b(convert::synth_tensor(4, "b", n * s.v_heads, 1.0f)),
        conv_w(convert::synth_tensor(5, "conv", s.conv_channels() * s.conv_kernel, 0.5f)),
        A_log(static_cast<std::size_t>(s.v_heads), 0.0f),
        dt_bias(static_cast<std::size_t>(s.v_heads), 1.0f),
        norm_w(static_cast<std::size_t>(s.v_dim), 1.0f) {}
};

// The mixer over n tokens of one sequence: conv, gates, the rule, the gated norm.
void mixer(const runtime::DeltaNetShape& s, const MixerInputs& in, int64_t t0, int64_t n, runtime::DeltaNetState& st,
           runtime::DeltaRuleForm form, std::vector<float>& work, std::vector<float>& g, std::vector<float>& beta,
           std::vector<float>& out) {
  const int64_t C = s.conv_channels(), H = s.v_heads, key = s.k_heads * s.k_dim;
  work.assign(in.qkv.begin() + t0 * C, in.qkv.begin() + (t0 + n) * C);
  runtime::causal_conv1d_silu(work.data(), n, C, in.conv_w.data(), s.conv_kernel, st.conv.data());
  g.resize(static_cast<std::size_t>(n * H));
  beta.resize(g.size());
  runtime::delta_gates(in.a.data() + t0 * H, in.b.data() + t0 * H, n, H, in.A_log.data(), in.dt_bias.data(), g.data(), beta.data());
  // q, k, v are the conv's channel blocks; copy them apart (rows of their own stride).
  std::vector<float> q(static_cast<std::size_t>(n * key)), k(q.size()), v(static_cast<std::size_t>(n * H * s.v_dim));
  for (int64_t t = 0; t < n; ++t) {
    const float* row = work.data() + t * C;
    std::copy(row, row + key, q.begin() + t * key);
    std::copy(row + key, row + 2 * key, k.begin() + t * key);
    std::copy(row + 2 * key, row + C, v.begin() + t * H * s.v_dim);
  }
  out.resize(v.size());
  runtime::gated_delta_rule(q.data(), k.data(), v.data(), g.data(), beta.data(), n, s, st.recurrent.data(), out.data(), form);
  runtime::gated_rms_norm(out.data(), in.z.data() + t0 * H * s.v_dim, n, H, s.v_dim, in.norm_w.data(), 1e-6f);
}

template <class F>
double timed(const DeltaNetBenchConfig& cfg, F&& f) {
  std::vector<double> t;
  for (int it = 0; it < cfg.warmup + cfg.iters; ++it) {
    const double t0 = now();
    f();
    if (it >= cfg.warmup) t.push_back(now() - t0);
  }
  return median(t);
}

}  // namespace

void DeltaNetBenchConfig::validate() const {
  if (iters < 1 || warmup < 0) fail(ErrorKind::Usage, "--iters must be >= 1 and --warmup >= 0");
  for (int64_t p : prompts)
    if (p < 1) fail(ErrorKind::Usage, "--prompt lengths must be >= 1");
  for (int64_t b : batch)
    if (b < 1) fail(ErrorKind::Usage, "--batch sizes must be >= 1");
}

runtime::DeltaNetShape deltanet_bench_shape(const std::string& name) {
  if (name == "qwen3_next" || name == "qwen3_5_moe") return {.k_heads = 16, .v_heads = 32, .k_dim = 128, .v_dim = 128, .conv_kernel = 4};
  fail(ErrorKind::Usage, "--shape \"", name, "\" is not qwen3_next or qwen3_5_moe");
}

std::vector<DeltaNetBenchRow> run_deltanet_bench(const DeltaNetBenchConfig& cfg) {
  cfg.validate();
  const runtime::DeltaNetShape& s = cfg.shape;
  const double per_token_flops = 7.0 * static_cast<double>(s.v_heads * s.k_dim * s.v_dim);  // decay, S^T k, update, S^T q
  const double state = 4.0 * static_cast<double>(s.recurrent_floats());
  std::vector<DeltaNetBenchRow> rows;
  std::vector<float> work, g, beta, out;
  for (int64_t n : cfg.prompts) {
    const MixerInputs in(s, n);
    runtime::DeltaNetState st;
    DeltaNetBenchRow r{"prefill", n, 0, 0, per_token_flops * static_cast<double>(n), 2 * state};
    r.chunked_s = timed(cfg, [&] {
      st.reset(s);
      mixer(s, in, 0, n, st, runtime::DeltaRuleForm::Chunked, work, g, beta, out);
    });
    r.recurrent_s = timed(cfg, [&] {
      st.reset(s);
      mixer(s, in, 0, n, st, runtime::DeltaRuleForm::Recurrent, work, g, beta, out);
    });
    rows.push_back(r);
  }
  for (int64_t b : cfg.batch) {
    const MixerInputs in(s, b);
    std::vector<runtime::DeltaNetState> st(static_cast<std::size_t>(b));
    for (auto& x : st) x.reset(s);
    DeltaNetBenchRow r{"decode", b, 0, 0, per_token_flops * static_cast<double>(b), 2 * state * static_cast<double>(b)};
    r.recurrent_s = timed(cfg, [&] {
      for (int64_t i = 0; i < b; ++i)
        mixer(s, in, i, 1, st[static_cast<std::size_t>(i)], runtime::DeltaRuleForm::Recurrent, work, g, beta, out);
    });
    rows.push_back(r);
  }
  return rows;
}

std::string deltanet_bench_table(const DeltaNetBenchConfig& cfg, const std::vector<DeltaNetBenchRow>& rows) {
  const runtime::DeltaNetShape& s = cfg.shape;
  std::string out = "# Gated DeltaNet mixer, one layer: " + std::to_string(s.k_heads) + " key heads, " + std::to_string(s.v_heads) +
                    " value heads, k/v dims " + std::to_string(s.k_dim) + "/" + std::to_string(s.v_dim) + ", conv " +
                    std::to_string(s.conv_kernel) + "; " + std::to_string(omp_get_max_threads()) + " threads, median of " +
                    std::to_string(cfg.iters) +
                    "\n# phase    tokens  chunked ms  recurrent ms  chunked GFLOP/s  recurrent GFLOP/s  state GB/s\n";
  char line[256];
  for (const auto& r : rows) {
    const double best = r.chunked_s > 0 ? std::min(r.chunked_s, r.recurrent_s) : r.recurrent_s;
    std::snprintf(line, sizeof line, "  %-7s %7lld  %10.3f  %12.3f  %15.2f  %17.2f  %10.2f\n", r.phase.c_str(),
                  static_cast<long long>(r.tokens), r.chunked_s * 1e3, r.recurrent_s * 1e3,
                  r.chunked_s > 0 ? r.flops / r.chunked_s / 1e9 : 0.0, r.flops / r.recurrent_s / 1e9, r.state_bytes / best / 1e9);
    out += line;
  }
  return out;
}

std::string deltanet_bench_json(const DeltaNetBenchConfig& cfg, const std::vector<DeltaNetBenchRow>& rows) {
  nlohmann::json j;
  j["shape"] = {{"k_heads", cfg.shape.k_heads},
                {"v_heads", cfg.shape.v_heads},
                {"k_dim", cfg.shape.k_dim},
                {"v_dim", cfg.shape.v_dim},
                {"conv_kernel", cfg.shape.conv_kernel}};
  j["threads"] = omp_get_max_threads();
  for (const auto& r : rows)
    j["rows"].push_back({{"phase", r.phase},
                         {"tokens", r.tokens},
                         {"chunked_s", r.chunked_s},
                         {"recurrent_s", r.recurrent_s},
                         {"flops", r.flops},
                         {"state_bytes", r.state_bytes}});
  return j.dump(1) + "\n";
}

}  // namespace moerun::bench

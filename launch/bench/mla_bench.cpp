// MLA decode-step benchmark.
#include "launch/bench/mla_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "base/error.hpp"
#include "base/matmul.hpp"
#include "io/model_file.hpp"
#include "convert/synthetic_model.hpp"
#include "runtime/dense_ops.hpp"
#include "runtime/blocks/dsa_indexer.hpp"
#include "runtime/blocks/mla_attention.hpp"

namespace moerun::bench {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

WeightMatrix random_weight(const std::string& name, int64_t rows, int64_t cols, DType dt) {
  const auto v = convert::synth_tensor(1, name, rows * cols, 1.0f / std::sqrt(static_cast<float>(cols)));
  WeightMatrix m;
  m.allocate(dt, rows, cols);
  if (dt == DType::F32)
    std::copy(v.begin(), v.end(), m.data.as<float>());
  else
    f32_to_bf16(v.data(), m.data.as<uint16_t>(), v.size());
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One MLA layer's weights (and its indexer's), random, prepared and packed as the runtime's blocks
// hold them.
struct OneLayer {
  runtime::MlaWeights mla;
  runtime::DsaIndexerWeights indexer;
};
OneLayer one_layer(const model::ModelConfig& c, Matmul& mm) {
  OneLayer w;
  runtime::MlaWeights& L = w.mla;
  const model::MlaShape& m = c.mla;
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim;
  if (m.q_lora_rank > 0) {
    L.wq_a = random_weight("wq_a", m.q_lora_rank, d, c.dtype);
    L.q_a_norm.assign(static_cast<std::size_t>(m.q_lora_rank), 1.0f);
    L.wq_b = random_weight("wq_b", q, m.q_lora_rank, c.dtype);
  } else {
    L.wq = random_weight("wq", q, d, c.dtype);
  }
  L.wkv_a = random_weight("wkv_a", m.kv_lora_rank + m.qk_rope_head_dim, d, c.dtype);
  L.kv_a_norm.assign(static_cast<std::size_t>(m.kv_lora_rank), 1.0f);
  L.wo = random_weight("wo", d, c.attention_out_dim(), c.dtype);
  L.prepare(random_weight("wkv_b", c.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank, c.dtype), c, mm);
  if (c.is_dsa()) {
    const model::DsaShape& s = c.dsa;
    runtime::DsaIndexerWeights& I = w.indexer;
    I.wq_b = random_weight("idx_wq_b", s.index_heads * s.index_head_dim, m.q_lora_rank, c.dtype);
    I.wk = random_weight("idx_wk", s.index_head_dim, d, c.dtype);
    I.weights = random_weight("idx_weights", s.index_heads, d, c.dtype);
    I.k_norm.assign(static_cast<std::size_t>(s.index_head_dim), 1.0f);
    I.k_norm_bias.assign(static_cast<std::size_t>(s.index_head_dim), 0.0f);
    I.pack(mm);
  }
  return w;
}

}  // namespace

model::ModelConfig mla_bench_shape(const std::string& name, DType dtype) {
  model::ModelConfig c;
  c.attention_type = model::AttentionType::Mla;
  c.dtype = dtype;
  c.mla = {0, 512, 128, 64, 128};
  c.head_dim = 192;
  c.rms_norm_eps = 1e-6;
  c.vocab_size = 1;
  c.max_position = 1 << 20;
  if (name == "deepseek_v2_lite") {
    c.hidden_size = 2048;
    c.num_heads = c.num_kv_heads = 16;
  } else if (name == "deepseek_v3" || name == "deepseek_v32") {
    c.hidden_size = 7168;
    c.num_heads = c.num_kv_heads = 128;
    c.mla.q_lora_rank = 1536;
    if (name == "deepseek_v32") c.dsa = {64, 128, 2048, {}};
  } else {
    fail(ErrorKind::Usage, "--shape must be deepseek_v2_lite, deepseek_v3 or deepseek_v32, not \"", name, "\"");
  }
  return c;
}

void MlaBenchConfig::validate() const {
  if (contexts.empty() || batch.empty()) fail(ErrorKind::Usage, "bench mla: --context and --batch need values");
  for (int64_t s : contexts)
    if (s < 1 || s > (1 << 20)) fail(ErrorKind::Usage, "--context: ", s, " is not in [1, 1048576]");
  for (int64_t b : batch)
    if (b < 1 || b > 1024) fail(ErrorKind::Usage, "--batch: ", b, " is not in [1, 1024]");
  if (iters < 1 || warmup < 0) fail(ErrorKind::Usage, "--iters must be >= 1 and --warmup >= 0");
}

std::vector<MlaBenchRow> run_mla_bench(const MlaBenchConfig& cfg) {
  cfg.validate();
  Matmul mm;
  const model::ModelConfig& c = cfg.model;
  const OneLayer w = one_layer(c, mm);
  const int64_t d = c.hidden_size, row = c.kv_k_dim();
  runtime::MlaAttention absorbed(c, mm, runtime::MlaMode::Absorbed), expanded(c, mm, runtime::MlaMode::Expanded);
  std::unique_ptr<runtime::DsaIndexer> indexer;
  if (c.is_dsa()) indexer = std::make_unique<runtime::DsaIndexer>(c, mm);
  std::vector<MlaBenchRow> rows;
  for (int64_t S : cfg.contexts)
    for (int64_t B : cfg.batch) {
      // B sequences with S cached positions of random (normed-sized) latents and keys.
      std::vector<runtime::KvCache> kv(static_cast<std::size_t>(B));
      const std::vector<float> cached = convert::synth_tensor(2, "cache", S * row, 1.0f);
      for (auto& k : kv) {
        k.init(1, row, 0, S + 1);
        k.append(0, cached.data(), nullptr, S);
      }
      const std::vector<float> xn = convert::synth_tensor(3, "x", B * d, 1.0f);
      std::vector<int32_t> pos(static_cast<std::size_t>(B), static_cast<int32_t>(S));
      std::vector<float> new_rows(static_cast<std::size_t>(B * row)), attn(static_cast<std::size_t>(B * c.attention_out_dim())),
          out(static_cast<std::size_t>(B * d));
      std::vector<runtime::DsaSelection> picks(static_cast<std::size_t>(B));
      auto step = [&](runtime::MlaAttention& a, bool sparse) {
        a.project(w.mla, xn.data(), B, pos.data(), new_rows.data());
        if (sparse) indexer->project(w.indexer, xn.data(), a.q_latent(), B, pos.data(), new_rows.data());
        std::vector<runtime::MlaChunk> chunks;
        for (int64_t b = 0; b < B; ++b) {
          kv[static_cast<std::size_t>(b)].append(0, new_rows.data() + b * row, nullptr, 1);
          chunks.push_back({b, 1, S, &kv[static_cast<std::size_t>(b)]});
          if (sparse && !indexer->attends_all(S)) {
            indexer->select(kv[static_cast<std::size_t>(b)], 0, b, 1, S, picks[static_cast<std::size_t>(b)]);
            chunks.back().selection = &picks[static_cast<std::size_t>(b)];
          }
        }
        a.attend(w.mla, 0, chunks, B, attn.data());
        mm.linear(attn.data(), B, w.mla.wo, out.data());
        for (auto& k : kv) k.row_state(0).k.resize(static_cast<std::size_t>(S * row));  // back to S positions
      };
      // Interleaved, so both forms see the same cache and memory state.
      std::vector<double> ta, te;
      for (int it = 0; it < cfg.warmup + cfg.iters; ++it) {
        double t0 = now();
        step(absorbed, false);
        double t1 = now();
        if (indexer)
          step(absorbed, true);
        else
          step(expanded, false);
        double t2 = now();
        if (it < cfg.warmup) continue;
        ta.push_back(t1 - t0);
        te.push_back(t2 - t1);
      }
      MlaBenchRow r{S, B, median(ta), median(te), B * (S + 1) * c.mla.latent_width() * 4};
      if (indexer) {  // per step, all sequences: scores and values of every head over the positions attended
        const double P = static_cast<double>(S + 1), K = std::min<double>(P, static_cast<double>(c.dsa.index_topk));
        const double per_pos = 2.0 * c.num_heads * (2.0 * c.mla.kv_lora_rank + c.mla.qk_rope_head_dim);
        r.dense_flops = B * P * per_pos;
        r.sparse_flops = B * (2.0 * c.dsa.index_heads * c.dsa.index_head_dim * P + K * per_pos);
        r.sparse_bytes = B * (P * c.dsa.index_head_dim + K * c.mla.latent_width()) * 4.0;
      }
      rows.push_back(r);
    }
  return rows;
}

namespace {
// DSA: the sparse step against the dense absorbed one, with both attentions' FLOPs and cache bytes.
std::string dsa_table(const MlaBenchConfig& cfg, const std::vector<MlaBenchRow>& rows) {
  const model::ModelConfig& c = cfg.model;
  std::string s = str("# moerun bench mla: one decode step of one DSA layer (DeepSeek-V3.2): hidden ", c.hidden_size, ", ", c.num_heads,
                      " heads, latent ", c.mla.kv_lora_rank, " + rope ", c.mla.qk_rope_head_dim, "; indexer ", c.dsa.index_heads,
                      " heads of ", c.dsa.index_head_dim, ", top ", c.dsa.index_topk, "; ", dtype_name(c.dtype), " weights; ",
                      omp_get_max_threads(), " threads, median of ", cfg.iters, "\n");
  char buf[256];
  std::snprintf(buf, sizeof buf, "#%8s %6s %10s %10s %8s %12s %12s %8s %10s %10s %8s\n", "context", "batch", "dense(ms)", "dsa(ms)", "time",
                "dense GFLOP", "dsa GFLOP", "flops", "dense MiB", "dsa MiB", "bytes");
  s += buf;
  std::snprintf(buf, sizeof buf, "#%8s %6s %10s %10s %8s %12s %12s %8s %10s %10s %8s\n", "", "", "", "", "dsa/dns", "(attention)",
                "(attention)", "dsa/dns", "(cache)", "(cache)", "dsa/dns");
  s += buf;
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, " %8lld %6lld %10.3f %10.3f %8.3f %12.3f %12.3f %8.3f %10.1f %10.1f %8.3f\n",
                  static_cast<long long>(r.context), static_cast<long long>(r.batch), r.absorbed_s * 1e3, r.expanded_s * 1e3,
                  r.expanded_s / r.absorbed_s, r.dense_flops * 1e-9, r.sparse_flops * 1e-9, r.sparse_flops / r.dense_flops,
                  static_cast<double>(r.cache_bytes) / (1 << 20), r.sparse_bytes / (1 << 20),
                  r.sparse_bytes / static_cast<double>(r.cache_bytes));
    s += buf;
  }
  s += "# dense: MLA's absorbed step over every cached position; dsa: the indexer's keys scored for every position, then the\n"
       "# absorbed step over its top positions (both: projections, attention, o_proj). FLOPs and bytes: the attention's alone\n";
  return s;
}
}  // namespace

std::string mla_bench_table(const MlaBenchConfig& cfg, const std::vector<MlaBenchRow>& rows) {
  const model::ModelConfig& c = cfg.model;
  if (c.is_dsa()) return dsa_table(cfg, rows);
  std::string s = str("# moerun bench mla: one decode step of one MLA layer: hidden ", c.hidden_size, ", ", c.num_heads, " heads, q_lora ",
                      c.mla.q_lora_rank, ", latent ", c.mla.kv_lora_rank, " + rope ", c.mla.qk_rope_head_dim, ", ", dtype_name(c.dtype),
                      " weights; ", omp_get_max_threads(), " threads, median of ", cfg.iters, "\n");
  char buf[256];
  std::snprintf(buf, sizeof buf, "#%8s %6s %13s %13s %9s %12s %13s\n", "context", "batch", "absorbed(ms)", "expanded(ms)", "speedup",
                "cache(MiB)", "cache read");
  s += buf;
  std::snprintf(buf, sizeof buf, "#%8s %6s %13s %13s %9s %12s %13s\n", "", "", "", "", "", "", "(GB/s, abs.)");
  s += buf;
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, " %8lld %6lld %13.3f %13.3f %9.2f %12.1f %13.1f\n", static_cast<long long>(r.context),
                  static_cast<long long>(r.batch), r.absorbed_s * 1e3, r.expanded_s * 1e3, r.expanded_s / r.absorbed_s,
                  static_cast<double>(r.cache_bytes) / (1 << 20), static_cast<double>(r.cache_bytes) / r.absorbed_s * 1e-9);
    s += buf;
  }
  s += "# absorbed: attention over the cached latents (the KV cache is all a step reads besides the weights); expanded:\n"
       "# every cached position's keys and values recomputed through kv_b first (what a prefill chunk does)\n";
  return s;
}

std::string mla_bench_json(const MlaBenchConfig& cfg, const std::vector<MlaBenchRow>& rows) {
  nlohmann::json j;
  j["hidden"] = cfg.model.hidden_size;
  j["heads"] = cfg.model.num_heads;
  j["q_lora_rank"] = cfg.model.mla.q_lora_rank;
  j["kv_lora_rank"] = cfg.model.mla.kv_lora_rank;
  j["dtype"] = dtype_name(cfg.model.dtype);
  j["threads"] = omp_get_max_threads();
  j["results"] = nlohmann::json::array();
  for (const auto& r : rows)
    j["results"].push_back({{"context", r.context},
                            {"batch", r.batch},
                            {"absorbed_s", r.absorbed_s},
                            {"expanded_s", r.expanded_s},
                            {"cache_bytes", r.cache_bytes}});
  return j.dump(2);
}

}  // namespace moerun::bench

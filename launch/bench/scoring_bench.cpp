// `moerun bench infer --scoring-compare`: what scoring costs over the prefill of generation, in one
// job, the three modes interleaved.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/error.hpp"
#include "comm/collectives.hpp"
#include "launch/bench/infer_bench.hpp"

namespace moerun::bench {
namespace {

struct Mode {
  const char* name;
  BenchScoring scoring;
  int64_t new_tokens;
};
const Mode kModes[] = {
    {"prefill", BenchScoring::None, 1}, {"prompt-logprobs", BenchScoring::PromptLogprobs, 0}, {"second-half", BenchScoring::SecondHalf, 0}};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string min_median_max(const std::vector<double>& v, const char* fmt) {
  char buf[128];
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  std::snprintf(buf, sizeof buf, fmt, *lo, median(v), *hi);
  return buf;
}

}  // namespace

std::vector<ScoringBenchRow> run_scoring_bench(const InferBenchConfig& given, int runs, MPI_Comm world) {
  // Steps as infer makes them (--max-batch-tokens, default 1024): a step's logits hold a row of the
  // vocabulary per scored token, and one step for the whole batch would hold them all at once.
  InferBenchConfig cfg = given;
  cfg.whole_batch_steps = false;
  const BenchDir bench_dir(cfg.work_dir, world);
  const std::string& dir = bench_dir.path();
  if (comm::rank_of(world) == 0) convert::write_synthetic_model(dir + "/model", cfg.model, true);
  std::vector<ScoringBenchRow> rows;
  for (const Mode& m : kModes) rows.push_back({m.name, {}, {}});
  run_infer_bench_point(cfg, dir, world);  // untimed: the first load of the model files
  for (int run = 0; run < runs; ++run) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      InferBenchConfig c = cfg;
      c.scoring = kModes[i].scoring;
      c.new_tokens = kModes[i].new_tokens;
      const BenchRun r = run_infer_bench_point(c, dir, world);
      // Per second of the steps with prompt tokens: infer's prefill rate.
      rows[i].tokens_per_s.push_back(r.run.prefill_seconds > 0 ? static_cast<double>(r.run.prefill_tokens) / r.run.prefill_seconds : 0);
      const auto router = r.engine.phases.find("router");
      const bool has = router != r.engine.phases.end() && router->second.count("head");
      rows[i].head_s.push_back(has ? router->second.at("head") : 0.0);
    }
  }
  return rows;
}

std::string scoring_bench_table(const InferBenchConfig& cfg, const std::vector<ScoringBenchRow>& rows) {
  const model::ModelConfig& m = cfg.model.model;
  std::string s =
      str("# moerun bench infer --scoring-compare: model ", m.num_layers, " layers, hidden ", m.hidden_size, ", ", m.num_experts,
          " experts x ", m.intermediate_size, " top-", m.top_k, ", vocab ", m.vocab_size, " ", dtype_name(m.dtype), "; ", cfg.batch,
          " prompts of ", cfg.prompt_len, " tokens; ", rows.front().tokens_per_s.size(), " interleaved runs\n");
  s += str("# steps of at most ", cfg.scheduler.max_batch_tokens, " tokens (--max-batch-tokens)\n");
  s += "# mode              prompt tokens/s (min/median/max)   ratio to prefill   LM head s (median)\n";
  const double base = median(rows.front().tokens_per_s);
  for (const ScoringBenchRow& r : rows) {
    char buf[256];
    std::snprintf(buf, sizeof buf, "  %-17s %-34s %-18.3f %.3f\n", r.mode.c_str(), min_median_max(r.tokens_per_s, "%.0f/%.0f/%.0f").c_str(),
                  base > 0 ? median(r.tokens_per_s) / base : 0.0, median(r.head_s));
    s += buf;
  }
  return s;
}

std::string scoring_bench_json(const InferBenchConfig& cfg, const std::vector<ScoringBenchRow>& rows) {
  nlohmann::json j;
  j["bench"] = "infer --scoring-compare";
  j["batch"] = cfg.batch;
  j["prompt_len"] = cfg.prompt_len;
  for (const ScoringBenchRow& r : rows) j["modes"][r.mode] = {{"tokens_per_s", r.tokens_per_s}, {"head_s", r.head_s}};
  return j.dump(2);
}

}  // namespace moerun::bench

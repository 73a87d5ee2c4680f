// Scoring: log-sum-exp and token log-probs against a float64 reference computed here, top-K order
// and ties, KL divergence, the scheduler's scored rows (prompt log-probs across chunks, prefill-only
// requests, no prefix reuse), the perplexity windows and summaries against hand-derived values.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "runtime/log_softmax.hpp"
#include "runtime/perplexity.hpp"
#include "runtime/prefix_cache.hpp"
#include "runtime/scheduler.hpp"
#include "tests/runtime/fake_forward.hpp"

namespace moerun::runtime {
namespace {

std::vector<float> random_row(int64_t V, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> r(static_cast<std::size_t>(V));
  for (float& x : r) x = n(g);
  return r;
}

double reference_lse(const std::vector<float>& r) {
  double m = -INFINITY, s = 0;
  for (float x : r) m = std::max(m, static_cast<double>(x));
  for (float x : r) s += std::exp(static_cast<double>(x) - m);
  return m + std::log(s);
}

TEST(LogSoftmax, MatchesFloat64ReferenceAtOddSizes) {
  for (int64_t V : {1, 7, 64, 1000, 32001, 151936}) {
    for (float scale : {0.1f, 5.0f, 40.0f}) {
      const auto row = random_row(V, static_cast<uint32_t>(V) + 3, scale);
      const double want = reference_lse(row);
      EXPECT_NEAR(log_sum_exp(row.data(), V), want, 1e-6 * std::max(1.0, std::abs(want))) << "V " << V << " scale " << scale;
    }
  }
  // Large logits do not overflow (the max is taken out first).
  std::vector<float> big{1000.0f, 999.0f, -1000.0f};
  EXPECT_NEAR(log_sum_exp(big.data(), 3), 1000.0 + std::log(1.0 + std::exp(-1.0)), 1e-9);
}

TEST(LogSoftmax, RowsInParallelEqualOneByOne) {
  const int64_t V = 5000, rows = 9;
  std::vector<float> all;
  for (int r = 0; r < rows; ++r) {
    const auto row = random_row(V, 100 + r, 3.0f);
    all.insert(all.end(), row.begin(), row.end());
  }
  const auto lse = log_sum_exp_rows(all.data(), rows, V);
  for (int r = 0; r < rows; ++r) EXPECT_EQ(lse[r], log_sum_exp(all.data() + r * V, V));
}

TEST(LogSoftmax, TokenLogprobAndTopKWithTies) {
  const std::vector<float> row{0.5f, 2.0f, -1.0f, 2.0f, 1.0f};
  const double lse = reference_lse(row);
  const io::TokenLogprob t = token_logprob(row.data(), 5, lse, 4, 3);
  EXPECT_EQ(t.token, 4);
  EXPECT_DOUBLE_EQ(t.logprob, 1.0 - lse);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].first, 1);  // tie of 2.0: the lower id first
  EXPECT_EQ(t.top[1].first, 3);
  EXPECT_EQ(t.top[2].first, 4);
  EXPECT_DOUBLE_EQ(t.top[0].second, 2.0 - lse);
  EXPECT_TRUE(token_logprob(row.data(), 5, lse, 0, 0).top.empty());
  EXPECT_EQ(token_logprob(row.data(), 5, lse, 0, 99).top.size(), 5u);  // K beyond V: all of them
  double mass = 0;
  for (const auto& [id, lp] : token_logprob(row.data(), 5, lse, 0, 5).top) mass += std::exp(lp);
  EXPECT_NEAR(mass, 1.0, 1e-12);
}

TEST(LogSoftmax, KlDivergence) {
  const int64_t V = 300;
  const auto a = random_row(V, 1, 2.0f), b = random_row(V, 2, 2.0f);
  std::vector<float> la(V), lb(V);
  log_softmax_row(a.data(), V, log_sum_exp(a.data(), V), la.data());
  log_softmax_row(b.data(), V, log_sum_exp(b.data(), V), lb.data());
  EXPECT_EQ(kl_divergence(la.data(), la.data(), V), 0.0);  // exactly
  double want = 0;
  for (int64_t v = 0; v < V; ++v) want += std::exp(static_cast<double>(la[v])) * (static_cast<double>(la[v]) - lb[v]);
  EXPECT_DOUBLE_EQ(kl_divergence(la.data(), lb.data(), V), want);
  EXPECT_GT(want, 0.0);
}

model::ModelConfig tiny() {
  model::ModelConfig c;
  c.vocab_size = 10;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.max_position = 16;
  c.eos_token_id = 9;
  c.num_experts = 2;
  c.top_k = 1;
  return c;
}

// Logits whose row r makes token (r + 1) % 10 the most likely (logit 2, the rest 0).
std::vector<float> rows_logits(int64_t rows) {
  std::vector<float> l(static_cast<std::size_t>(rows * 10), 0.0f);
  for (int64_t r = 0; r < rows; ++r) l[static_cast<std::size_t>(r * 10 + (r + 1) % 10)] = 2.0f;
  return l;
}

TEST(ScoringScheduler, PromptLogprobsAcrossChunksAndPrefillOnly) {
  io::Request a;
  a.id = "a";
  a.prompt_tokens = {1, 2, 3, 4, 5};
  a.max_new_tokens = 1;
  a.prompt_logprobs = 1;
  a.logprobs = 2;
  io::Request b = a;
  b.id = "b";
  b.max_new_tokens = 0;
  b.logprobs = -1;
  b.prompt_logprobs = 0;
  std::vector<io::Request> rs{a, b};
  SchedulerConfig cfg;
  cfg.max_batch_tokens = 3;
  Scheduler s(cfg, tiny(), rs, {0, 1});
  EXPECT_TRUE(s.take_trivial().empty());  // b scores its prompt: not trivial
  std::vector<io::Result> done;
  int64_t scored_rows = 0;
  while (!s.done()) {
    StepBatch step = s.next_step();
    for (const SeqChunk& ch : step.chunks) {
      EXPECT_LE(ch.score_end, ch.count);
      if (ch.emit) EXPECT_LT(ch.score_end, ch.count);
    }
    fake_forward(step);
    StepLogits out;
    out.want_scored = true;
    for (auto& r : s.complete_step(rows_logits(step.logit_rows()), &out)) done.push_back(r);
    scored_rows += static_cast<int64_t>(out.scored.size());
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(scored_rows, 8);  // 4 prompt tokens after the first, per request
  for (const io::Result& r : done) {
    ASSERT_TRUE(r.has_prompt_logprobs);
    ASSERT_EQ(r.prompt_logprobs.size(), 4u) << r.id;
    for (std::size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(r.prompt_logprobs[j].token, static_cast<int32_t>(j + 2));
      EXPECT_LT(r.prompt_logprobs[j].logprob, 0.0);
    }
  }
  const io::Result& ra = done[0].id == "a" ? done[0] : done[1];
  const io::Result& rb = done[0].id == "a" ? done[1] : done[0];
  EXPECT_EQ(ra.prompt_logprobs[0].top.size(), 1u);
  ASSERT_EQ(ra.logprobs.size(), 1u);
  EXPECT_EQ(ra.logprobs[0].token, ra.output_tokens[0]);
  EXPECT_EQ(ra.logprobs[0].top.size(), 2u);
  EXPECT_EQ(ra.logprobs[0].top[0].first, ra.output_tokens[0]);  // greedy: the top token
  EXPECT_TRUE(rb.output_tokens.empty());
  EXPECT_FALSE(rb.has_logprobs);
  EXPECT_TRUE(rb.prompt_logprobs[0].top.empty());
}

TEST(ScoringScheduler, ScoreFromSkipsTheFirstTargets) {
  io::Request a;
  a.id = "w0";
  a.prompt_tokens = {1, 2, 3, 4, 5, 6};
  a.max_new_tokens = 0;
  a.prompt_logprobs = 0;
  a.score_from = 3;  // tokens 3..5 (values 4, 5, 6)
  std::vector<io::Request> rs{a};
  Scheduler s({}, tiny(), rs, {0});
  StepBatch step = s.next_step();
  EXPECT_EQ(step.logit_rows(), 3);
  fake_forward(step);
  auto done = s.complete_step(rows_logits(3));
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(done[0].prompt_logprobs.size(), 3u);
  EXPECT_EQ(done[0].prompt_logprobs[0].token, 4);
  EXPECT_EQ(done[0].prompt_logprobs[2].token, 6);
}

TEST(ScoringScheduler, ScoringRequestsComputeACachedPrefix) {
  PrefixCacheConfig pc;
  pc.max_bytes = 1 << 20;
  pc.block_tokens = 2;
  const model::ModelConfig mc = tiny();
  PrefixCache cache(pc, mc.num_layers, mc.num_moe_layers(), mc.kv_k_dim(), mc.kv_v_dim(), 1);
  io::Request plain;
  plain.id = "p";
  plain.prompt_tokens = {1, 2, 3, 4, 5};
  plain.max_new_tokens = 1;
  io::Request scoring = plain;
  scoring.id = "s";
  scoring.prompt_logprobs = 0;
  std::vector<io::Request> rs{plain, scoring, plain};
  rs[2].id = "p2";
  SchedulerConfig cfg;
  cfg.max_batch_size = 1;
  Scheduler s(cfg, mc, rs, {0, 1, 2}, &cache);
  std::vector<int64_t> computed;
  while (!s.done()) {
    StepBatch step = s.next_step();
    for (const SeqChunk& ch : step.chunks)
      if (ch.pos0 < 5) computed.push_back(ch.pos0);
    fake_forward(step, 1);
    s.complete_step(rows_logits(step.logit_rows()));
  }
  // p computes its prompt from 0; s (scoring) from 0 again, although the prefix is cached; p2 reuses it.
  ASSERT_GE(computed.size(), 3u);
  EXPECT_EQ(computed[0], 0);
  EXPECT_EQ(computed[1], 0);
  EXPECT_GT(computed[2], 0);
}

TEST(Perplexity, WindowsAsLlamaPerplexity) {
  const WindowPlan p = plan_windows(1000, 128, 0);
  EXPECT_EQ(p.stride, 128);
  EXPECT_EQ(p.windows, 7);  // whole windows only
  EXPECT_EQ(p.first_target, 64);  // the second half
  EXPECT_EQ(p.scored(), 7 * 64);
  const WindowPlan q = plan_windows(1000, 128, 32);
  EXPECT_EQ(q.first_target, 96);  // the last stride tokens: every token from 96 on exactly once
  EXPECT_EQ(q.windows, (1000 - 128) / 32 + 1);
  EXPECT_EQ(q.start(1) + q.first_target, q.start(0) + q.context);
  EXPECT_THROW(plan_windows(100, 128, 0), Error);
}

TEST(Perplexity, SummariesByHand) {
  PerplexityReport r;
  summarize_nll({1.0, 2.0, 3.0}, r);
  EXPECT_DOUBLE_EQ(r.nll, 2.0);
  EXPECT_DOUBLE_EQ(r.perplexity, std::exp(2.0));
  // population variance 2/3, over n - 1 = 2: sqrt(1/3)
  EXPECT_NEAR(r.stderr_, std::exp(2.0) * std::sqrt(1.0 / 3.0), 1e-12);
  std::vector<double> kld;
  for (int i = 0; i < 100; ++i) kld.push_back(i);  // 0..99
  const KlReport k = summarize_kl(kld, std::vector<double>(100, 1.0), std::vector<double>(100, 2.0), std::exp(2.2));
  EXPECT_DOUBLE_EQ(k.mean, 49.5);
  EXPECT_DOUBLE_EQ(k.median, 50.0);  // nearest rank of 49.5
  EXPECT_DOUBLE_EQ(k.p99, 98.0);
  EXPECT_DOUBLE_EQ(k.max, 99.0);
  EXPECT_DOUBLE_EQ(k.top1, 1.0);
  EXPECT_NEAR(k.perplexity_ratio, std::exp(0.2), 1e-12);
}

}  // namespace
}  // namespace moerun::runtime

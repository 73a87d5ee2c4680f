// Continuous batching: budgets respected, long prompts chunked, new requests join as others finish,
// and stop conditions (max_new_tokens, EOS, max_position). Logits are fabricated so the sampled
// token is chosen by the test (greedy picks the single 1.0).
#include <gtest/gtest.h>

#include <set>

#include "runtime/infer.hpp"
#include "runtime/minhash.hpp"
#include "runtime/scheduler.hpp"
#include "tests/runtime/fake_forward.hpp"

namespace moerun::runtime {
namespace {

model::ModelConfig tiny() {
  model::ModelConfig c;
  c.vocab_size = 10;
  c.num_layers = 1;
  c.num_kv_heads = 1;
  c.head_dim = 2;
  c.max_position = 8;
  c.eos_token_id = 9;
  return c;
}

io::Request req(const std::string& id, std::vector<int32_t> prompt, int64_t max_new) {
  io::Request r;
  r.id = id;
  r.prompt_tokens = std::move(prompt);
  r.max_new_tokens = max_new;
  return r;
}

std::vector<float> logits_for(const std::vector<int32_t>& next) {
  std::vector<float> l(next.size() * 10, 0.0f);
  for (std::size_t i = 0; i < next.size(); ++i) l[i * 10 + next[i]] = 1.0f;
  return l;
}

TEST(Scheduler, BudgetsChunkingAndJoining) {
  std::vector<io::Request> rs = {req("a", {1, 2, 3, 4, 5}, 2), req("b", {1}, 1), req("c", {1, 2}, 1)};
  SchedulerConfig cfg;
  cfg.max_batch_size = 2;
  cfg.max_batch_tokens = 3;
  Scheduler s(cfg, tiny(), rs, {0, 1, 2});
  // Step 1: a's prompt chunk of 3 (budget), nothing else fits.
  StepBatch b = s.next_step();
  ASSERT_EQ(b.tokens(), 3);
  EXPECT_EQ(b.emitting(), 0);
  fake_forward(b);
  EXPECT_TRUE(s.complete_step({}).empty());
  // Step 2: rest of a (2 tokens, emits) + b joins (1 token, emits).
  b = s.next_step();
  ASSERT_EQ(b.tokens(), 3);
  EXPECT_EQ(b.chunks[0].pos0, 3);
  EXPECT_EQ(b.emitting(), 2);
  fake_forward(b);
  auto done = s.complete_step(logits_for({4, 6}));
  ASSERT_EQ(done.size(), 1u);  // b finished (max_new 1)
  EXPECT_EQ(done[0].id, "b");
  EXPECT_EQ(done[0].output_tokens, (std::vector<int32_t>{6}));
  // Step 3: a decodes 1 token, c joins with its 2-token prompt.
  b = s.next_step();
  EXPECT_EQ(b.tokens(), 3);
  EXPECT_EQ(b.positions[0], 5);
  fake_forward(b);
  done = s.complete_step(logits_for({9, 3}));  // a hits EOS before max_new
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].id, "a");
  EXPECT_EQ(done[0].finish_reason, "eos");
  EXPECT_EQ(done[0].output_tokens, (std::vector<int32_t>{4, 9}));
  EXPECT_EQ(done[1].id, "c");
  EXPECT_TRUE(s.done());
}

TEST(Scheduler, StopsAtMaxPosition) {
  std::vector<io::Request> rs = {req("a", {1, 2, 3, 4, 5, 6}, 100)};
  Scheduler s({}, tiny(), rs, {0});
  std::vector<io::Result> done;
  int steps = 0;
  while (!s.done()) {
    StepBatch b = s.next_step();
    fake_forward(b);
    done = s.complete_step(logits_for(std::vector<int32_t>(static_cast<std::size_t>(b.emitting()), 5)));
    ++steps;
  }
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].finish_reason, "length");
  EXPECT_EQ(done[0].output_tokens.size(), 2u);  // 6 + 2 = max_position 8
}

// Under a memory budget a step scores at most max_logit_rows prompt tokens (each a vocabulary row
// of logits): a scoring prompt of 6 tokens (5 scored rows) and a decode row fit a cap of 3 per step.
TEST(Scheduler, ScoredRowsPerStepStayUnderTheCap) {
  io::Request a = req("a", {1, 2, 3, 4, 5, 6}, 1);
  a.prompt_logprobs = 0;
  std::vector<io::Request> rs = {a, req("b", {1}, 3)};
  SchedulerConfig cfg;
  cfg.max_logit_rows = 3;
  Scheduler s(cfg, tiny(), rs, {0, 1});
  int64_t steps = 0, scored = 0;
  std::vector<io::Result> done;
  while (!s.done()) {
    StepBatch b = s.next_step();
    EXPECT_LE(b.logit_rows(), 3) << "step " << steps;
    for (const SeqChunk& ch : b.chunks) scored += ch.score_end - ch.score_begin;
    fake_forward(b);
    for (auto& r : s.complete_step(std::vector<float>(static_cast<std::size_t>(b.logit_rows()) * 10, 0.0f))) done.push_back(r);
    ASSERT_LT(++steps, 20);
  }
  EXPECT_EQ(scored, 5);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& r : done) {
    if (r.id == "a") {
      EXPECT_EQ(r.prompt_logprobs.size(), 5u);
    }
  }
  EXPECT_GE(steps, 3);  // 5 scored rows and the emitted token need two steps more than one would
}

// A token whose values stopped being finite ends its request with an error naming the layer; the
// other request of the step samples as usual.
TEST(Scheduler, NonFiniteValuesEndTheirRequestWithAnError) {
  std::vector<io::Request> rs = {req("a", {1, 2}, 2), req("b", {1, 3}, 2)};
  Scheduler s({}, tiny(), rs, {0, 1});
  StepBatch b = s.next_step();
  ASSERT_EQ(b.tokens(), 4);
  fake_forward(b);
  std::vector<int32_t> nonfinite(4, -1);
  nonfinite[3] = 0;  // b's second token, at layer 0
  auto done = s.complete_step(logits_for({4, 6}), nullptr, &nonfinite);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, "b");
  EXPECT_NE(done[0].error.find("non-finite values (NaN or Inf) from layer 0 at positions 0..1"), std::string::npos) << done[0].error;
  b = s.next_step();
  ASSERT_EQ(b.tokens(), 1);  // a decodes on
  fake_forward(b);
  std::vector<int32_t> head(1, 1);  // num_layers: only the logits were not finite
  done = s.complete_step(logits_for({5}), nullptr, &head);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_NE(done[0].error.find("from the LM head at positions 2..2"), std::string::npos) << done[0].error;
  EXPECT_TRUE(s.done());
}

TEST(Scheduler, ZeroNewTokensNeedsNoCompute) {
  std::vector<io::Request> rs = {req("a", {1, 2}, 0)};
  Scheduler s({}, tiny(), rs, {0});
  EXPECT_TRUE(s.done());
  auto t = s.take_trivial();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_TRUE(t[0].output_tokens.empty());
  EXPECT_EQ(t[0].finish_reason, "length");
}

}  // namespace
}  // namespace moerun::runtime

namespace moerun::runtime {
namespace {

TEST(SplitRequests, BalancesByCostNotCount) {
  // Costs (prompt + max_new): 100, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10 -> one router takes the
  // big one, the other the ten small ones.
  std::vector<io::Request> rs;
  rs.push_back(req("big", std::vector<int32_t>(50, 1), 50));
  for (int i = 0; i < 10; ++i) rs.push_back(req(str("s", i), std::vector<int32_t>(5, 1), 5));
  std::vector<int64_t> all(rs.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  const auto parts = split_requests(rs, all, 2);
  EXPECT_EQ(parts[0], (std::vector<int64_t>{0}));
  EXPECT_EQ(parts[1].size(), 10u);
  EXPECT_TRUE(std::is_sorted(parts[1].begin(), parts[1].end()));  // input order kept
  // Every request exactly once.
  const auto three = split_requests(rs, all, 3);
  std::vector<int64_t> merged;
  for (const auto& p : three) merged.insert(merged.end(), p.begin(), p.end());
  std::sort(merged.begin(), merged.end());
  EXPECT_EQ(merged, all);
}

TEST(SplitRequests, PrefixGroupsStayTogetherInFairPieces) {
  // Four prefixes (first block of 4 tokens: p, p, p, p), four requests each, same cost: with a
  // prefix cache each prefix goes to one router, two per router.
  std::vector<io::Request> rs;
  for (int i = 0; i < 16; ++i) {
    std::vector<int32_t> prompt(4, i % 4);
    prompt.push_back(100 + i);
    rs.push_back(req(str("q", i), prompt, 5));
  }
  std::vector<int64_t> all(rs.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  const auto parts = split_requests(rs, all, 2, 4);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].size(), 8u);
  EXPECT_EQ(parts[1].size(), 8u);
  for (const auto& p : parts) {
    std::set<int32_t> prefixes;
    for (int64_t i : p) prefixes.insert(rs[static_cast<std::size_t>(i)].prompt_tokens[0]);
    EXPECT_EQ(prefixes.size(), 2u);  // whole groups
    EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
  }
  // One prefix shared by all: cut into fair pieces, both routers busy.
  std::vector<io::Request> same;
  for (int i = 0; i < 8; ++i) same.push_back(req(str("s", i), {7, 7, 7, 7, i}, 5));
  std::vector<int64_t> eight{0, 1, 2, 3, 4, 5, 6, 7};
  const auto halves = split_requests(same, eight, 2, 4);
  EXPECT_EQ(halves[0].size(), 4u);
  EXPECT_EQ(halves[1].size(), 4u);
}

TEST(MinHash, EstimatesJaccard) {
  std::vector<int64_t> a, b;
  for (int64_t i = 0; i < 100; ++i) a.push_back(i);
  for (int64_t i = 50; i < 150; ++i) b.push_back(i);  // |a & b| / |a | b| = 50 / 150
  EXPECT_NEAR(estimated_jaccard(minhash_of(a), minhash_of(b)), 1.0 / 3.0, 0.15);
  EXPECT_EQ(estimated_jaccard(minhash_of(a), minhash_of(a)), 1.0);
  std::vector<int64_t> c;
  for (int64_t i = 1000; i < 1100; ++i) c.push_back(i);
  EXPECT_LT(estimated_jaccard(minhash_of(a), minhash_of(c)), 0.1);
  EXPECT_EQ(estimated_jaccard(minhash_of({}), minhash_of({})), 0.0);
  // Layer-major elements; empty slots do not count.
  EXPECT_EQ(expert_set({{3, -1, 3, 1}, {0, 2}}, 4), (std::vector<int64_t>{1, 3, 4, 6}));
}

// Prompt tokens of "topic" t (first token t) route every layer to experts 2t and 2t+1.
void topic_forward(const StepBatch& b) {
  for (const auto& ch : b.chunks) {
    std::vector<float> z(static_cast<std::size_t>(ch.count * ch.kv->row_state(0).k_dim), 0.0f);
    ch.kv->append(0, z.data(), z.data(), ch.count);
    if (!ch.routing) continue;
    const int32_t topic = b.ids[static_cast<std::size_t>(ch.first)] == 1 ? 0 : 1;
    ch.routing->resize(1);
    for (int64_t i = 0; i < ch.count; ++i) {
      (*ch.routing)[0].push_back(2 * topic);
      (*ch.routing)[0].push_back(2 * topic + 1);
    }
  }
}

TEST(Scheduler, MinHashBatchesSimilarRequestsTogether) {
  model::ModelConfig m = tiny();
  m.max_position = 64;
  m.num_experts = 4;
  // a, c: topic 0 (prompts start with 1); b, d: topic 1 (start with 2).
  std::vector<io::Request> rs = {req("a", {1, 1, 1}, 3), req("b", {2, 2}, 3), req("c", {1, 1}, 3), req("d", {2, 2, 2}, 3)};
  SchedulerConfig cfg;
  cfg.max_batch_size = 2;
  cfg.batching = Batching::MinHash;
  Scheduler s(cfg, m, rs, {0, 1, 2, 3});
  // Step 1: every prompt is prefilled (the pool is 4 x 2); each emits its first token.
  StepBatch b = s.next_step();
  EXPECT_EQ(b.tokens(), 10);
  topic_forward(b);
  EXPECT_TRUE(s.complete_step(logits_for({5, 5, 5, 5})).empty());
  // Steps 2-3: the decode batch is a (the oldest) and c (same experts), not b.
  for (int step = 0; step < 2; ++step) {
    b = s.next_step();
    ASSERT_EQ(b.chunks.size(), 2u);
    EXPECT_EQ(b.ids, (std::vector<int32_t>{5, 5}));
    EXPECT_EQ(b.chunks[0].pos0, 3 + step);  // a: prompt 3
    EXPECT_EQ(b.chunks[1].pos0, 2 + step);  // c: prompt 2
    topic_forward(b);
    const auto done = s.complete_step(logits_for({5, 5}));
    if (step == 1) {
      ASSERT_EQ(done.size(), 2u);
      EXPECT_EQ(done[0].id, "a");
      EXPECT_EQ(done[1].id, "c");
    }
  }
  // Then b and d.
  b = s.next_step();
  ASSERT_EQ(b.chunks.size(), 2u);
  EXPECT_EQ(b.chunks[0].pos0, 2);  // b
  EXPECT_EQ(b.chunks[1].pos0, 3);  // d
  EXPECT_EQ(s.batching().batches, 2);
  EXPECT_EQ(s.batching().joined_similar, 2);
}

TEST(Scheduler, MinHashWaitingTooLongSeedsTheNextBatch) {
  model::ModelConfig m = tiny();
  m.max_position = 64;
  m.num_experts = 4;
  // a, c, e: topic 0 with long generations; b: topic 1. Batch size 2; b may wait 2 steps only.
  std::vector<io::Request> rs = {req("a", {1}, 4), req("b", {2}, 2), req("c", {1}, 4), req("e", {1}, 4)};
  SchedulerConfig cfg;
  cfg.max_batch_size = 2;
  cfg.batching = Batching::MinHash;
  cfg.max_wait_steps = 2;
  Scheduler s(cfg, m, rs, {0, 1, 2, 3});
  StepBatch b = s.next_step();
  topic_forward(b);
  s.complete_step(logits_for({5, 5, 5, 5}));
  std::vector<std::string> order;
  for (int step = 0; step < 20 && !s.done(); ++step) {
    b = s.next_step();
    topic_forward(b);
    for (const auto& r : s.complete_step(logits_for(std::vector<int32_t>(b.chunks.size(), 5)))) order.push_back(r.id);
  }
  // a and c decode first; when a slot frees, e (similar) would join, but b has waited too long:
  // the batch drains and b runs before e.
  EXPECT_EQ(order, (std::vector<std::string>{"a", "c", "b", "e"}));
  EXPECT_EQ(s.batching().forced, 2);  // b's batch, and then e's (it waited as long)
}

}  // namespace
}  // namespace moerun::runtime

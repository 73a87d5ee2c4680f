// Continuous-batching scheduler.
#include "runtime/scheduler.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <span>

#include "base/error.hpp"
#include "base/log.hpp"
#include "runtime/log_softmax.hpp"
#include "runtime/sampling.hpp"

namespace moerun::runtime {

int64_t max_kv_tokens(const std::vector<io::Request>& requests, const SchedulerConfig& c, int64_t max_position) {
  std::vector<int64_t> len;
  for (const io::Request& r : requests)
    len.push_back(std::min(max_position, static_cast<int64_t>(r.prompt_tokens.size()) + r.max_new_tokens));
  const auto n = static_cast<std::size_t>(max_sequences_in_flight(requests, c));
  std::partial_sort(len.begin(), len.begin() + static_cast<std::ptrdiff_t>(n), len.end(), std::greater<>());
  return std::accumulate(len.begin(), len.begin() + static_cast<std::ptrdiff_t>(n), int64_t{0});
}

int64_t max_sequences_in_flight(const std::vector<io::Request>& requests, const SchedulerConfig& c) {
  const int64_t in_flight =
      c.batching == Batching::MinHash ? std::max(c.max_batch_size, c.pool > 0 ? c.pool : 4 * c.max_batch_size) : c.max_batch_size;
  return std::min<int64_t>(in_flight, static_cast<int64_t>(requests.size()));
}

int64_t max_step_logit_rows(const std::vector<io::Request>& requests, const SchedulerConfig& c) {
  const bool scoring = std::any_of(requests.begin(), requests.end(), [](const io::Request& r) { return r.prompt_logprobs >= 0; });
  return scoring ? c.max_batch_tokens : max_sequences_in_flight(requests, c);
}

int64_t expected_decode_steps(const std::vector<io::Request>& requests, const SchedulerConfig& c) {
  int64_t tokens = 0;
  for (const io::Request& r : requests) tokens += r.max_new_tokens;
  return tokens / std::max<int64_t>(1, std::min<int64_t>(c.max_batch_size, static_cast<int64_t>(requests.size())));
}

Batching parse_batching(const std::string& s) {
  if (s == "fifo") return Batching::Fifo;
  if (s == "minhash") return Batching::MinHash;
  fail(ErrorKind::Usage, "--batching: \"", s, "\" is not fifo or minhash");
}

void SchedulerConfig::validate() const {
  if (max_batch_size < 1) fail_config("max_batch_size", "must be >= 1");
  if (max_batch_tokens < 1) fail_config("max_batch_tokens", "must be >= 1");
  if (!(similarity_threshold >= 0 && similarity_threshold <= 1))
    fail_config("similarity_threshold", "must be in [0, 1], not ", similarity_threshold);
  if (pool < 0) fail_config("pool", "must be >= 0 (0: 4 x the batch size)");
  if (max_wait_steps < 1) fail_config("max_wait_steps", "must be >= 1");
}

Scheduler::Scheduler(const SchedulerConfig& cfg, const model::ModelConfig& model, const std::vector<io::Request>& requests,
                     std::vector<int64_t> pending, PrefixCache* prefix)
    : cfg_(cfg), model_(model), requests_(requests), prefix_(prefix) {
  for (int64_t i : pending) {
    const io::Request& r = requests_[static_cast<std::size_t>(i)];
    if (r.max_new_tokens == 0 && r.prompt_logprobs < 0) {
      io::Result res{r.id, {}, "length", static_cast<int64_t>(r.prompt_tokens.size()), ""};
      res.has_logprobs = r.logprobs >= 0;
      trivial_.push_back(std::move(res));
    } else {
      queue_.push_back(i);
    }
  }
}

std::vector<io::Result> Scheduler::take_trivial() {
  return std::exchange(trivial_, {});
}

bool Scheduler::computing_first_block(uint64_t key) const {
  for (const Sequence& s : active_)
    if (s.first_block == key && s.cached_upto < prefix_->block_tokens()) return true;
  return false;
}

int64_t Scheduler::prompt_chunk(const Sequence& s, int64_t budget) const {
  int64_t n = std::min(budget, s.prompt_len - s.processed);
  if (prefix_ && model_.num_linear_layers() > 0) {
    // A linear layer's state can be kept only where a chunk ends: at the prompt's last whole block
    // before its last token, which a later request with the same prefix resumes from.
    const int64_t B = prefix_->block_tokens(), cut = (s.prompt_len - 1) / B * B;
    if (s.processed < cut && s.processed + n > cut) n = cut - s.processed;
  }
  return n;
}

StepBatch Scheduler::next_step() {
  StepBatch b;
  rows_of_.clear();
  ++step_;
  const bool minhash = cfg_.batching == Batching::MinHash;
  // In flight: FIFO admits up to the batch size; minhash prefills ahead up to the pool.
  const int64_t in_flight = !minhash ? cfg_.max_batch_size : cfg_.pool > 0 ? cfg_.pool : 4 * cfg_.max_batch_size;
  int64_t budget = cfg_.max_batch_tokens;
  // Each logit row is a vocabulary row of floats: under a memory budget a step scores at most
  // max_logit_rows prompt tokens (a prompt's later tokens wait for the next step).
  int64_t rows_left = cfg_.max_logit_rows > 0 ? cfg_.max_logit_rows : std::numeric_limits<int64_t>::max();
  auto add_chunk = [&](Sequence& s, int64_t n) {
    SeqChunk ch;
    auto shape = [&](int64_t count) {
      ch.count = count;
      // The last token computed emits the next one, unless the request only scores its prompt.
      ch.emit = s.processed + count == static_cast<int64_t>(s.tokens.size()) && s.request->max_new_tokens > 0;
      if (s.request->prompt_logprobs >= 0) {  // rows predicting prompt tokens score_from .. prompt_len - 1
        ch.score_begin = std::clamp(s.request->score_from - 1 - s.processed, int64_t{0}, count);
        ch.score_end = std::clamp(s.prompt_len - 1 - s.processed, ch.score_begin, count);
      }
    };
    shape(n);
    if (ch.logit_rows() > rows_left) shape(n = std::max<int64_t>(0, ch.score_begin + rows_left));
    if (n == 0) return;
    rows_left -= ch.logit_rows();
    ch.kv = &s.kv;
    ch.first = b.tokens();
    ch.pos0 = s.processed;
    if (s.processed < s.prompt_len) ch.routing = &s.routing;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = s.processed + i;
      b.ids.push_back(s.tokens[static_cast<std::size_t>(p)]);
      b.positions.push_back(static_cast<int32_t>(p));
      b.is_prefill.push_back(p < s.prompt_len);
      b.request.push_back(s.request->line);
    }
    s.processed += n;
    budget -= n;
    b.chunks.push_back(ch);
    // Every chunk, rows or not: a middle chunk's tokens may be where a request's values stopped being finite.
    rows_of_.push_back({&s, ch.pos0, ch.score_begin, ch.score_end, ch.emit, ch.first, ch.count});
  };
  // Decode tokens first (one each), so generation never starves behind long prompts.
  for (Sequence& s : active_)
    if (s.processed >= s.prompt_len && s.decoding && budget > 0) add_chunk(s, 1);
  for (Sequence& s : active_)
    if (s.processed < s.prompt_len && budget > 0) add_chunk(s, prompt_chunk(s, budget));
  while (!queue_.empty() && budget > 0 && static_cast<int64_t>(active_.size()) < in_flight) {
    const int64_t idx = queue_.front();
    const io::Request& r = requests_[static_cast<std::size_t>(idx)];
    const uint64_t key = prefix_ ? prefix_->first_block_key(r.prompt_tokens) : 0;
    // A request whose first block another sequence is computing right now waits until that block
    // is cached (in input order: the queue stops here), instead of computing it a second time.
    if (key != 0 && prefix_->can_store() && !prefix_->has_first_block(r.prompt_tokens) && computing_first_block(key)) break;
    queue_.pop_front();
    Sequence& s = active_.emplace_back();
    s.request = &r;
    s.index = idx;
    s.tokens = r.prompt_tokens;
    s.prompt_len = static_cast<int64_t>(r.prompt_tokens.size());
    s.first_block = key;
    const int64_t reserve = std::min(model_.max_position, s.prompt_len + r.max_new_tokens);
    s.kv.init(model_, reserve);
    // At least the last prompt token is computed: its logits give the first generated token. A
    // request scoring its prompt computes all of it: a cached prefix has no logits.
    if (prefix_ && r.prompt_logprobs < 0)
      s.cached_upto = s.processed = prefix_->reuse(s.tokens, s.prompt_len - 1, s.kv, s.routing);
    else
      s.routing.assign(static_cast<std::size_t>(model_.num_moe_layers()), {});
    add_chunk(s, prompt_chunk(s, budget));
  }
  return b;
}

io::Result Scheduler::result_of(const Sequence& s, const std::string& reason) const {
  const io::Request& r = *s.request;
  io::Result res;
  res.id = r.id;
  res.output_tokens.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
  res.finish_reason = reason;
  res.prompt_len = s.prompt_len;
  res.has_prompt_logprobs = r.prompt_logprobs >= 0;
  res.prompt_logprobs = s.prompt_logprobs;
  res.has_logprobs = r.logprobs >= 0;
  res.logprobs = s.logprobs;
  return res;
}

void Scheduler::score_rows(const std::vector<float>& logits, const std::vector<double>& lse, StepLogits* out) {
  const int64_t V = model_.vocab_size;
  int64_t row = 0;
  for (const RowsOf& c : rows_of_) {
    Sequence& s = *c.seq;
    if (c.nonfinite >= 0) {  // its rows are not finite: nothing to score
      row += c.score_end - c.score_begin + (c.emit ? 1 : 0);
      continue;
    }
    for (int64_t j = c.score_begin; j < c.score_end; ++j, ++row) {
      const int64_t target_pos = c.pos0 + j + 1;
      const int32_t target = s.tokens[static_cast<std::size_t>(target_pos)];
      const float* lg = logits.data() + row * V;
      s.prompt_logprobs.push_back(token_logprob(lg, V, lse[static_cast<std::size_t>(row)], target, s.request->prompt_logprobs));
      if (out && out->want_scored) out->scored.push_back({s.index, target_pos, target, row, lse[static_cast<std::size_t>(row)]});
    }
    row += c.emit ? 1 : 0;
  }
}

bool Scheduler::emit_token(Sequence& s, const float* lg, double lse) {
  const io::Request& r = *s.request;
  const int64_t V = model_.vocab_size;
  const int64_t step = static_cast<int64_t>(s.tokens.size()) - s.prompt_len;
  const std::span<const int32_t> all(s.tokens);
  const int32_t tok =
      sample_token(lg, V, r.temperature, r.top_p, r.sampling, r.seed, step, all.first(static_cast<std::size_t>(s.prompt_len)),
                   all.subspan(static_cast<std::size_t>(s.prompt_len)), sample_scratch_);
  if (r.logprobs >= 0) s.logprobs.push_back(token_logprob(lg, V, lse, tok, r.logprobs));
  s.tokens.push_back(tok);
  const int64_t generated = static_cast<int64_t>(s.tokens.size()) - s.prompt_len;
  if (!r.stop.empty() && cfg_.token_bytes && tok >= 0 && static_cast<std::size_t>(tok) < cfg_.token_bytes->size()) {
    // Only the bytes a match could still end in are kept: the longest stop string less one.
    std::size_t longest = 0;
    for (const std::string& st : r.stop) longest = std::max(longest, st.size());
    s.text_tail += (*cfg_.token_bytes)[static_cast<std::size_t>(tok)];
    for (const std::string& st : r.stop) s.stopped = s.stopped || s.text_tail.find(st) != std::string::npos;
    if (s.text_tail.size() >= longest) s.text_tail.erase(0, s.text_tail.size() - (longest - 1));
    if (s.stopped) return true;
  }
  return model_.is_end_token(tok) || generated >= r.max_new_tokens || static_cast<int64_t>(s.tokens.size()) >= model_.max_position;
}

bool Scheduler::mark_nonfinite(const std::vector<int32_t>* nonfinite) {
  bool any = false;
  for (RowsOf& c : rows_of_) {
    for (int64_t t = c.first; nonfinite && t < c.first + c.count; ++t) {
      const int32_t l = (*nonfinite)[static_cast<std::size_t>(t)];
      if (l >= 0 && (c.nonfinite < 0 || l < c.nonfinite)) c.nonfinite = l;
    }
    any = any || c.nonfinite >= 0;
  }
  return any;
}

io::Result Scheduler::nonfinite_result(const RowsOf& c) const {
  const Sequence& s = *c.seq;
  const std::string where = c.nonfinite < model_.num_layers ? str("layer ", c.nonfinite) : std::string("the LM head");
  io::Result r{s.request->id,
               {},
               "",
               s.prompt_len,
               str("non-finite values (NaN or Inf) from ", where, " at positions ", c.pos0, "..", c.pos0 + c.count - 1,
                   ": the model's weights overflow float32")};
  return r;
}

std::vector<io::Result> Scheduler::complete_step(const std::vector<float>& logits, StepLogits* out, const std::vector<int32_t>* nonfinite) {
  std::vector<io::Result> finished;
  const int64_t V = model_.vocab_size;
  const bool failures = mark_nonfinite(nonfinite);
  std::vector<const Sequence*> done_seqs;
  for (const RowsOf& c : rows_of_) {
    if (c.nonfinite < 0) continue;
    finished.push_back(nonfinite_result(c));
    done_seqs.push_back(c.seq);
  }
  auto failed = [&](const Sequence& s) { return failures && std::find(done_seqs.begin(), done_seqs.end(), &s) != done_seqs.end(); };
  if (prefix_) {
    // Prompt blocks completed by this step become reusable (not those of a request that failed).
    for (Sequence& s : active_) {
      if (failed(s)) continue;
      const int64_t done = std::min(s.processed, s.prompt_len);
      if (done - s.cached_upto < prefix_->block_tokens()) continue;
      prefix_->insert(s.tokens, done, s.kv, s.routing);
      s.cached_upto = done / prefix_->block_tokens() * prefix_->block_tokens();
    }
  }
  for (Sequence& s : active_) s.kv.trim_windows();
  // Log-sum-exps only where a log-probability is wanted (rows in parallel).
  bool scoring = false;
  for (const RowsOf& c : rows_of_) scoring = scoring || c.score_end > c.score_begin || (c.emit && c.seq->request->logprobs >= 0);
  const int64_t rows = static_cast<int64_t>(logits.size()) / V;
  const std::vector<double> lse = scoring ? log_sum_exp_rows(logits.data(), rows, V) : std::vector<double>(static_cast<std::size_t>(rows));
  score_rows(logits, lse, out);
  std::vector<Sequence*> prefilled;  // sequences whose prompt ended this step
  int64_t row = 0;
  for (const RowsOf& c : rows_of_) {
    Sequence& s = *c.seq;
    row += c.score_end - c.score_begin;
    if (c.nonfinite >= 0) {
      row += c.emit ? 1 : 0;
      continue;
    }
    if (!c.emit) {  // a scoring request's prompt ended: it is done
      if (s.processed == s.prompt_len && s.request->max_new_tokens == 0) {
        finished.push_back(result_of(s, "length"));
        done_seqs.push_back(&s);
      }
      continue;
    }
    if (static_cast<int64_t>(s.tokens.size()) == s.prompt_len) prefilled.push_back(&s);
    const float* lg = logits.data() + row * V;
    if (out && out->want_emitted) {
      out->emitted.insert(out->emitted.end(), lg, lg + V);
      out->emitted_ids.push_back(s.request->id);
    }
    const bool ended = emit_token(s, lg, lse[static_cast<std::size_t>(row)]);
    ++row;
    if (!ended) continue;
    finished.push_back(result_of(s, s.stopped ? "stop" : model_.is_end_token(s.tokens.back()) ? "eos" : "length"));
    done_seqs.push_back(&s);
  }
  prefilled.erase(std::remove_if(prefilled.begin(), prefilled.end(),
                                 [&](Sequence* s) { return std::find(done_seqs.begin(), done_seqs.end(), s) != done_seqs.end(); }),
                  prefilled.end());
  active_.remove_if([&](const Sequence& s) { return std::find(done_seqs.begin(), done_seqs.end(), &s) != done_seqs.end(); });
  rows_of_.clear();
  if (cfg_.batching == Batching::MinHash) form_decode_batch(prefilled);
  return finished;
}

void Scheduler::form_decode_batch(const std::vector<Sequence*>& prefilled) {
  for (Sequence* s : prefilled) {
    s->decoding = false;
    s->parked_at = step_;
    s->signature = minhash_of(expert_set(s->routing, model_.num_experts));
  }
  std::vector<Sequence*> batch, parked;
  for (Sequence& s : active_) {
    if (s.processed < s.prompt_len) continue;  // still prefilling
    (s.decoding ? batch : parked).push_back(&s);
  }
  if (parked.empty()) return;
  // Oldest first (then input order): the seed of a new batch, and the order of ties.
  std::stable_sort(parked.begin(), parked.end(), [](const Sequence* a, const Sequence* b) {
    return a->parked_at < b->parked_at || (a->parked_at == b->parked_at && a->index < b->index);
  });
  const bool starving = step_ - parked.front()->parked_at >= cfg_.max_wait_steps;
  if (batch.empty()) {
    parked.front()->decoding = true;
    batch.push_back(parked.front());
    parked.erase(parked.begin());
    ++batching_.batches;
    if (starving) ++batching_.forced;
  } else if (starving) {
    return;  // the batch drains, and the one that waited seeds the next
  }
  // Pairwise similarity to the batch's oldest member (its seed, or the oldest left): a union of the
  // members' experts would grow with every joiner and look less and less like any one request.
  const Sequence* anchor = *std::min_element(batch.begin(), batch.end(), [](const Sequence* a, const Sequence* b) {
    return a->parked_at < b->parked_at || (a->parked_at == b->parked_at && a->index < b->index);
  });
  while (static_cast<int64_t>(batch.size()) < cfg_.max_batch_size && !parked.empty()) {
    auto best = parked.end();
    double best_j = -1;
    for (auto it = parked.begin(); it != parked.end(); ++it) {
      const double j = estimated_jaccard((*it)->signature, anchor->signature);
      if (j > best_j) {
        best_j = j;
        best = it;
      }
    }
    if (best_j < cfg_.similarity_threshold) break;
    (*best)->decoding = true;
    batch.push_back(*best);
    parked.erase(best);
    ++batching_.joined_similar;
    batching_.similarity_sum += best_j;
  }
}

}  // namespace moerun::runtime

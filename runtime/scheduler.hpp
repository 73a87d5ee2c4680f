// Scheduler: continuous batching. Each step takes one token from every decoding sequence, then
// prompt chunks of prefilling sequences, then admits new requests while --max-batch-size and
// --max-batch-tokens allow (long prompts are prefilled in chunks across steps). After the forward
// pass it samples the emitted tokens and retires finished sequences (max_new_tokens, EOS, or
// max_position), so new requests join as others finish.
//
// Expert-similarity batching (--batching minhash): up to --batching-pool requests are prefilled
// ahead; a prefilled sequence parks with a MinHash signature of the experts its prompt used. The
// decode batch (at most --max-batch-size sequences) is seeded with the oldest parked sequence and
// takes parked ones whose estimated Jaccard similarity to the batch's experts reaches
// --batching-threshold, most similar first; the experts a decode step needs then overlap, and a
// small L1 holds more of them. A parked sequence that waited --batching-max-wait steps stops the
// batch from taking others until it has drained, so no request starves.
#include "base/counter_fields.hpp"
#include "runtime/minhash.hpp"
#pragma once
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "model/model_config.hpp"
#include "io/requests.hpp"
#include "runtime/attention.hpp"
#include "runtime/model_forward.hpp"
#include "runtime/prefix_cache.hpp"

namespace moerun::runtime {

enum class Batching { Fifo, MinHash };
Batching parse_batching(const std::string& s);  // Usage error naming --batching

struct SchedulerConfig {
  int64_t max_batch_size = 32;  // sequences in flight (minhash: sequences decoding together)
  int64_t max_batch_tokens = 1024;  // tokens per step (prefill chunks + decode tokens)
  Batching batching = Batching::Fifo;
  double similarity_threshold = 0.7;  // minhash: estimated Jaccard a sequence needs to join the batch
  int64_t pool = 0;  // minhash: sequences prefilled or parked at most (0: 4 x max_batch_size)
  int64_t max_wait_steps = 64;  // minhash: parked this long, a sequence is next
  int64_t max_logit_rows = 0;  // vocabulary rows one step may score (0: no cap; set from the memory budget)
  // The bytes each token id stands for (special tokens: none), for requests with stop strings: their
  // generated text is followed token by token and ends at a match (finish_reason "stop"). Null:
  // stop strings are matched only when the output is written.
  std::shared_ptr<const std::vector<std::string>> token_bytes;
  void validate() const;  // Usage error naming the option
};

// The most KV-cache rows the scheduler can hold at once for these requests: the longest ones
// (prompt + budget, at most max_position) of as many as it keeps in flight (the memory budget
// reserves them).
int64_t max_kv_tokens(const std::vector<io::Request>& requests, const SchedulerConfig& c, int64_t max_position);
// How many sequences it keeps in flight for these requests (each holds a recurrent state in a hybrid model).
int64_t max_sequences_in_flight(const std::vector<io::Request>& requests, const SchedulerConfig& c);
// The most logit rows (vocabulary rows) one step of these requests holds without a cap: every token
// of the step when one of them scores its prompt, else one per sequence in flight.
int64_t max_step_logit_rows(const std::vector<io::Request>& requests, const SchedulerConfig& c);
// About how many decode steps these requests take: every token they may generate, over the
// batch's width (--huge-pages auto weighs a job's length by it).
int64_t expected_decode_steps(const std::vector<io::Request>& requests, const SchedulerConfig& c);

struct Sequence {
  const io::Request* request = nullptr;
  int64_t index = 0;  // position of the request in the input
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int64_t prompt_len = 0;
  int64_t processed = 0;  // tokens whose K/V are in the cache
  KvCache kv;
  PromptRouting routing;  // expert slots of its prompt tokens so far
  uint64_t first_block = 0;  // PrefixCache::first_block_key of the prompt
  int64_t cached_upto = 0;  // prompt tokens offered to the prefix cache
  bool decoding = true;  // minhash: in the decode batch (false: parked after its prefill)
  int64_t parked_at = 0;  // minhash: step it parked at
  MinHashSignature signature;  // minhash: of its prompt's experts
  std::vector<io::TokenLogprob> prompt_logprobs, logprobs;  // scoring requests: so far
  std::string text_tail;  // stop strings: the last bytes of the generated text (the longest stop's worth)
  bool stopped = false;  // a stop string matched
};

// A scored prompt token of the last step: row `row` of the step's logits predicts token `target`
// at position `target_pos` of request `request` (an index into the request list); lse is the row's
// log-sum-exp.
struct ScoredRow {
  int64_t request = 0;
  int64_t target_pos = 0;
  int32_t target = 0;
  int64_t row = 0;
  double lse = 0;
};

// What a step's caller may take besides its results (each only when asked for).
struct StepLogits {
  bool want_emitted = false;  // --logits-out: the logits behind every emitted token
  std::vector<float> emitted;  // [emitted tokens, vocab]
  std::vector<std::string> emitted_ids;
  bool want_scored = false;  // perplexity's KL divergence and saved log-probs
  std::vector<ScoredRow> scored;
};

struct BatchingCounters {
  int64_t batches = 0;  // decode batches seeded
  int64_t joined_similar = 0;  // sequences that joined a batch by similarity
  int64_t forced = 0;  // batches seeded for a sequence that waited too long
  double similarity_sum = 0;  // estimated Jaccard of the joiners to their batch, summed

  static const std::vector<CounterField<BatchingCounters>>& fields() {
    using B = BatchingCounters;
    static const std::vector<CounterField<B>> f{counter("batches", &B::batches), counter("joined_similar", &B::joined_similar),
                                                counter("forced", &B::forced), counter("similarity_sum", &B::similarity_sum)};
    return f;
  }
};

class Scheduler {
 public:
  // `pending`: indices into `requests` to run, in order. `prefix`: optional prefix cache.
  Scheduler(const SchedulerConfig& cfg, const model::ModelConfig& model, const std::vector<io::Request>& requests,
            std::vector<int64_t> pending, PrefixCache* prefix = nullptr);

  bool done() const { return active_.empty() && queue_.empty(); }
  // Builds the next step (call only when !done()).
  StepBatch next_step();
  // Samples from logits [logit_rows, vocab] of the last step and scores its scored rows; returns the
  // requests that finished. `nonfinite`: per token of the step, the first layer whose output was
  // not finite (ModelForward::nonfinite_layers); such a request ends with an error naming it.
  std::vector<io::Result> complete_step(const std::vector<float>& logits, StepLogits* out = nullptr,
                                        const std::vector<int32_t>* nonfinite = nullptr);
  // Results of requests that need no compute (max_new_tokens 0, nothing to score); taken once.
  std::vector<io::Result> take_trivial();
  int64_t active() const { return static_cast<int64_t>(active_.size()); }
  const BatchingCounters& batching() const { return batching_; }

 private:
  SchedulerConfig cfg_;
  model::ModelConfig model_;
  const std::vector<io::Request>& requests_;
  std::deque<int64_t> queue_;
  std::list<Sequence> active_;
  // The chunks of the last step that produced logits, in chunk order.
  struct RowsOf {
    Sequence* seq = nullptr;
    int64_t pos0 = 0;  // position of the chunk's first token
    int64_t score_begin = 0, score_end = 0;
    bool emit = false;
    int64_t first = 0, count = 0;  // the chunk's tokens in the step
    int32_t nonfinite = -1;  // the first layer whose output was not finite for one of them
  };
  // Marks each chunk's first non-finite layer; returns whether any chunk has one.
  bool mark_nonfinite(const std::vector<int32_t>* nonfinite);
  io::Result nonfinite_result(const RowsOf& c) const;
  std::vector<RowsOf> rows_of_;
  std::vector<io::Result> trivial_;
  PrefixCache* prefix_ = nullptr;
  int64_t step_ = 0;
  BatchingCounters batching_;
  std::vector<float> sample_scratch_;  // a row's adjusted logits (runtime/sampling: bias, penalties)
  // minhash: parks sequences whose prefill just ended, then fills the decode batch.
  void form_decode_batch(const std::vector<Sequence*>& prefilled);
  // Whether an active sequence is still computing the first prompt block keyed `key`.
  bool computing_first_block(uint64_t key) const;
  // Prompt tokens of `s` for this step, within `budget` (cut at a block boundary for linear layers).
  int64_t prompt_chunk(const Sequence& s, int64_t budget) const;
  // The scored rows of the last step: log-probs appended to their sequences (and listed in out).
  void score_rows(const std::vector<float>& logits, const std::vector<double>& lse, StepLogits* out);
  // Samples the emitted token of a sequence from `row`; true when the sequence finished.
  bool emit_token(Sequence& s, const float* row, double lse);
  io::Result result_of(const Sequence& s, const std::string& reason) const;
};

}  // namespace moerun::runtime

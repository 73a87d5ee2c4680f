// The batch of one forward step: chunks of sequences (prefill chunks and decode tokens mixed) with
// their tokens, and its split into micro-batches.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/attention.hpp"

namespace moerun::runtime {

// A run of consecutive tokens of one sequence inside the step batch.
struct SeqChunk {
  KvCache* kv = nullptr;
  int64_t first = 0;  // index of its first token in the batch
  int64_t count = 0;
  int64_t pos0 = 0;  // position of its first token
  bool emit = false;  // produce logits for its last token
  // Prompt chunks: their expert slots are appended here, per layer ([layer][token * top_k + j]).
  std::vector<std::vector<int32_t>>* routing = nullptr;
  // Scoring: logits also for its tokens [score_begin, score_end) (offsets in the chunk), before the
  // emitted token's; score_end <= count - 1 when emit (the emitted row is never one of them).
  int64_t score_begin = 0, score_end = 0;

  int64_t logit_rows() const { return score_end - score_begin + (emit ? 1 : 0); }
};

struct StepBatch {
  std::vector<int32_t> ids;  // [T] token ids
  std::vector<int32_t> positions;  // [T]
  std::vector<uint8_t> is_prefill;  // [T] prompt token (1) or generated token (0)
  std::vector<int64_t> request;  // [T] request (input line) of each token, for traces
  std::vector<SeqChunk> chunks;

  int64_t tokens() const { return static_cast<int64_t>(ids.size()); }
  int64_t decode_tokens() const;  // generated tokens fed back (not prompt tokens)
  int64_t emitting() const;
  int64_t logit_rows() const;  // rows of the step's logits: scored tokens and emitted ones
};

// Contiguous token range [tok0, tok1) and chunk range [chunk0, chunk1) of one micro-batch.
struct MicroBatch {
  int64_t tok0 = 0, tok1 = 0;
  std::size_t chunk0 = 0, chunk1 = 0;
};

// Splits the batch into `m` micro-batches of about equal tokens without splitting a chunk (some may
// be empty). Every rank runs exactly `m` per layer, so the count, not the content, is global.
std::vector<MicroBatch> split_micro_batches(const StepBatch& batch, int m);

// The micro-batches a step runs: the configured count where some router's batch has two chunks or
// more, else 1.
// A lone chunk fills one micro-batch whatever the count, so the others would be empty, yet each
// still costs every rank an exchange per layer (a one-sequence decode went 2 -> 1 exchanges a
// layer: docs/PERFORMANCE.md, issue 67); its content, and so capacity, is the same either way.
int64_t step_micro_batches(int64_t configured, bool a_router_has_several_chunks);

}  // namespace moerun::runtime

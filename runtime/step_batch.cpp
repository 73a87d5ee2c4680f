// The step batch's counts and its micro-batches.
#include "runtime/step_batch.hpp"

namespace moerun::runtime {

int64_t StepBatch::decode_tokens() const {
  int64_t n = 0;
  for (uint8_t p : is_prefill) n += p ? 0 : 1;
  return n;
}

int64_t StepBatch::emitting() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.emit;
  return n;
}

int64_t StepBatch::logit_rows() const {
  int64_t n = 0;
  for (const auto& c : chunks) n += c.logit_rows();
  return n;
}

std::vector<MicroBatch> split_micro_batches(const StepBatch& b, int m) {
  std::vector<MicroBatch> out(static_cast<std::size_t>(m));
  const int64_t T = b.tokens();
  std::size_t c = 0;
  int64_t tok = 0;
  for (int i = 0; i < m; ++i) {
    MicroBatch& mb = out[static_cast<std::size_t>(i)];
    mb.tok0 = tok;
    mb.chunk0 = c;
    const int64_t target = T * (i + 1) / m;  // cumulative token target for this boundary
    while (c < b.chunks.size() && (i == m - 1 || tok + b.chunks[c].count / 2 < target)) tok += b.chunks[c++].count;
    mb.tok1 = tok;
    mb.chunk1 = c;
  }
  return out;
}

int64_t step_micro_batches(int64_t configured, bool a_router_has_several_chunks) {
  return a_router_has_several_chunks ? configured : 1;
}

}  // namespace moerun::runtime

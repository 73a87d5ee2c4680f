// The bytes of a step's exchanges and their time over a fitted link.
#include "runtime/exchange_time.hpp"

#include "base/error.hpp"
#include "runtime/moe_protocol.hpp"
#include "runtime/step_batch.hpp"

namespace moerun::runtime {

StepExchange step_exchange(const model::ModelConfig& c, int64_t tokens_per_router, int64_t micro_batches) {
  if (tokens_per_router < 1 || micro_batches < 1)
    fail(ErrorKind::Usage, "a step's exchange needs tokens >= 1 and micro-batches >= 1, not ", tokens_per_router, " and ", micro_batches);
  StepExchange s;
  s.tokens_per_router = tokens_per_router;
  // A decode step's tokens are its sequences: one alone runs in one micro-batch. Otherwise an
  // empty micro-batch is exchanged too: every rank takes part.
  s.micro_batches = step_micro_batches(micro_batches, tokens_per_router > 1);
  s.exchanges = c.num_moe_layers() * s.micro_batches;
  const double rows = static_cast<double>((tokens_per_router + s.micro_batches - 1) / s.micro_batches * c.top_k);
  s.dispatch_bytes = rows * static_cast<double>(MoeExchangeProtocol::dispatch_record_bytes(c.hidden_size));
  s.combine_bytes = rows * static_cast<double>(MoeExchangeProtocol::combine_record_bytes(c.hidden_size));
  return s;
}

double step_exchange_seconds(const StepExchange& s, const comm::LinkModel& dispatch, const comm::LinkModel& combine) {
  return static_cast<double>(s.exchanges) * (dispatch.seconds(s.dispatch_bytes) + combine.seconds(s.combine_bytes));
}

}  // namespace moerun::runtime

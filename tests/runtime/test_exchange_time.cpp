// A step's exchange bytes and time over a fitted link, against numbers worked out by hand.
#include <gtest/gtest.h>

#include "base/error.hpp"
#include "runtime/exchange_time.hpp"

namespace moerun::runtime {
namespace {

// d 64, top-2, 4 layers of which the first is dense: 3 MoE layers.
model::ModelConfig four_layers() {
  model::ModelConfig c;
  c.hidden_size = 64;
  c.top_k = 2;
  c.num_layers = 4;
  c.num_experts = 8;
  c.layer_mlp = {model::MlpKind::Dense, model::MlpKind::Moe, model::MlpKind::Moe, model::MlpKind::Moe};
  return c;
}

TEST(StepExchange, BytesAreTheLargestMicroBatchsRowsOutAndBack) {
  // 5 tokens in 2 micro-batches: the larger has 3 tokens, 6 rows; a record is the expert id (4
  // bytes) and the hidden row (256), a result the row (256).
  const StepExchange s = step_exchange(four_layers(), 5, 2);
  EXPECT_EQ(s.exchanges, 3 * 2);
  EXPECT_DOUBLE_EQ(s.dispatch_bytes, 6 * 260.0);
  EXPECT_DOUBLE_EQ(s.combine_bytes, 6 * 256.0);
}

TEST(StepExchange, AnEmptyMicroBatchIsExchangedToo) {
  // Two tokens in 4 micro-batches: every rank still takes part in 4 exchanges a layer (the engine
  // counts them so: bench infer --link-fit's pairs), the largest carrying a token's 2 rows.
  const StepExchange s = step_exchange(four_layers(), 2, 4);
  EXPECT_EQ(s.micro_batches, 4);
  EXPECT_EQ(s.exchanges, 3 * 4);
  EXPECT_DOUBLE_EQ(s.dispatch_bytes, 2 * 260.0);
}

TEST(StepExchange, OneTokenRunsInOneMicroBatch) {
  // A router's lone sequence fills one micro-batch whatever the count: the step runs just that one.
  const StepExchange s = step_exchange(four_layers(), 1, 4);
  EXPECT_EQ(s.micro_batches, 1);
  EXPECT_EQ(s.exchanges, 3);
  EXPECT_DOUBLE_EQ(s.dispatch_bytes, 2 * 260.0);
}

TEST(StepExchange, TimeIsEveryExchangeAtAlphaPlusBytesOverBandwidth) {
  const StepExchange s = step_exchange(four_layers(), 5, 2);
  const comm::LinkModel link{10.0, 1.0, 0.0, {}};  // 10 us, 1 GB/s
  // 6 pairs x (2 x 10 us + (1560 + 1536) bytes / 1e9 bytes/s) = 6 x 23.096 us.
  EXPECT_NEAR(step_exchange_seconds(s, link, link), 6 * 23.096e-6, 1e-12);
  // The combine over its own fit: 6 x (10 us + 1.560 us + 30 us + 1536 / 0.5e9 s) = 6 x 44.632 us.
  const comm::LinkModel back{30.0, 0.5, 0.0, {}};
  EXPECT_NEAR(step_exchange_seconds(s, link, back), 6 * 44.632e-6, 1e-12);
}

TEST(StepExchange, AnEmptyStepIsRefused) {
  EXPECT_THROW(step_exchange(four_layers(), 0, 2), Error);
  EXPECT_THROW(step_exchange(four_layers(), 4, 0), Error);
}

}  // namespace
}  // namespace moerun::runtime

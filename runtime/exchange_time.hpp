// What one step moves through the MoE all-to-all, and how long the links take for it: the bytes a
// router sends in each dispatch and gets back in each combine, timed by an alpha-beta model of the
// exchange (comm/link_model, fitted by `bench a2a`). `inspect --link-fit` prints it.
#pragma once
#include <cstdint>

#include "comm/link_model.hpp"
#include "model/model_config.hpp"

namespace moerun::runtime {

struct StepExchange {
  int64_t tokens_per_router = 0;  // the step's tokens on one router (a decode step: its sequences)
  int64_t micro_batches = 1;
  int64_t exchanges = 0;  // dispatch + combine pairs in the step: MoE layers x micro-batches
  double dispatch_bytes = 0;  // one router's records in one dispatch (expert id + hidden row)
  double combine_bytes = 0;  // the rows it gets back in one combine
};

// A decode step of `tokens_per_router` tokens, split into `micro_batches` (the last ones may be
// shorter, or empty: the bytes are the largest one's, and every micro-batch is exchanged), or into
// one where the router has one token (step_micro_batches).
StepExchange step_exchange(const model::ModelConfig& c, int64_t tokens_per_router, int64_t micro_batches);

// The step's exchange time: every dispatch at `dispatch`'s alpha + bytes / bandwidth and every
// combine at `combine`'s, one after the other (a router waits for each before its layer goes on).
double step_exchange_seconds(const StepExchange& s, const comm::LinkModel& dispatch, const comm::LinkModel& combine);

}  // namespace moerun::runtime

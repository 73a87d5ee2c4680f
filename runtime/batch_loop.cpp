// The step loops of routers and expert ranks.
#include "runtime/batch_loop.hpp"

#include <chrono>
#include <optional>
#include <utility>

#include "base/log.hpp"
#include "comm/collectives.hpp"
#include "runtime/progress.hpp"

namespace moerun::runtime {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The step control (every rank, every step), summed over ranks. Expert ranks send zeros. The
// counts are of the step before; `several` (routers whose coming batch has two chunks or more) is
// of the coming one: it sets the step's micro-batches.
struct StepControl {
  int64_t busy = 0, done = 0, tokens = 0, generated = 0, prompt = 0, several = 0;

  void reduce(const Engine& e) {
    std::vector<int64_t> v{busy, done, tokens, generated, prompt, several};
    if (e.distributed()) comm::allreduce_sum_timed(v, e.world(), e.config().comm_timeout_s, "step control");
    *this = {v[0], v[1], v[2], v[3], v[4], v[5]};
  }
  int micro_batches(const Engine& e) const { return static_cast<int>(step_micro_batches(e.config().micro_batches, several > 0)); }
};

class RouterLoop {
 public:
  RouterLoop(Engine& e, const std::vector<io::Request>& requests, const RouterWork& work, const BatchLoopConfig& cfg, ResultSink& sink,
             RoutingStats& stats)
      : e_(e), requests_(requests), work_(work), cfg_(cfg), sink_(sink), stats_(stats) {}

  BatchLoopResult run() {
    const model::ModelConfig& mc = e_.model();
    std::vector<int64_t> runnable;
    for (int64_t i : work_.requests) {
      const io::Request& r = requests_[static_cast<std::size_t>(i)];
      if (r.error.empty()) {
        runnable.push_back(i);
      } else {
        emit({r.id, {}, "", 0, str("line ", r.line, ": ", r.error)});
      }
    }
    if (cfg_.prefix_cache.max_bytes > 0) {
      std::vector<uint8_t> linear;
      for (int64_t l = 0; l < mc.num_layers; ++l) linear.push_back(mc.is_linear_layer(l));
      prefix_.emplace(cfg_.prefix_cache, mc.num_layers, mc.num_moe_layers(), mc.kv_k_dim(), mc.kv_v_dim(), mc.top_k, std::move(linear));
    }
    Scheduler sched(cfg_.scheduler, mc, requests_, runnable, prefix_ ? &*prefix_ : nullptr);
    for (const io::Result& r : sched.take_trivial()) emit(r);
    sink_.step_done();
    Progress progress(work_.total_requests, work_.token_budget, !cfg_.progress || e_.rank() != 0);
    int64_t done_total = work_.done_before, tokens_total = 0, generated_total = 0, prompt_total = 0;
    while (true) {
      // The coming batch is taken before the control, which agrees on its micro-batches.
      const bool busy = !sched.done();
      const StepBatch batch = busy ? sched.next_step() : StepBatch{};
      StepControl ctl{busy ? 1 : 0,
                      std::exchange(done_, 0),
                      std::exchange(tokens_, 0),
                      std::exchange(generated_, 0),
                      std::exchange(prompt_, 0),
                      batch.chunks.size() > 1 ? 1 : 0};
      ctl.reduce(e_);
      done_total += ctl.done;
      tokens_total += ctl.tokens;
      generated_total += ctl.generated;
      prompt_total += ctl.prompt;
      progress.update(done_total, prompt_total, generated_total);
      e_.requests_finished(done_total);
      if (ctl.busy == 0) break;
      e_.step_boundary();
      step(batch, sched, ctl.micro_batches(e_));
    }
    progress.finish(done_total, prompt_total, generated_total);
    BatchLoopResult out;
    out.run = run_;
    out.processed_tokens = tokens_total;
    out.seconds = progress.elapsed();
    out.batching = sched.batching();
    if (prefix_) {
      out.prefix_on = true;
      out.prefix = prefix_->counters();
    }
    return out;
  }

 private:
  void emit(const io::Result& r) {
    sink_.result(r);
    ++done_;
  }

  void step(const StepBatch& batch, Scheduler& sched, int micro_batches) {
    const auto step_start = Clock::now();
    e_.step(batch, logits_, &stats_, micro_batches);
    const int64_t prompt_tokens = batch.tokens() - batch.decode_tokens();
    tokens_ = batch.tokens();
    // The progress line: prompt tokens processed (or taken from the prefix cache), and tokens generated.
    const int64_t skipped = prefix_ ? prefix_->counters().skipped_tokens : 0;
    prompt_ = prompt_tokens + skipped - std::exchange(skipped_seen_, skipped);
    generated_ = batch.emitting();
    run_.generated_tokens += batch.emitting();
    StepLogits out;
    out.want_emitted = sink_.wants_logits();
    out.want_scored = sink_.wants_scored_rows();
    for (const io::Result& r : sched.complete_step(logits_, &out, &e_.step_nonfinite_layers())) {
      if (!r.error.empty() && cfg_.warn_failed) log::warn("request ", r.id, ": ", r.error);
      emit(r);
    }
    // Before the results count as done (the Job commits them next): a KL divergence or saved
    // log-probs of a finished window are complete when its result is.
    if (out.want_scored) sink_.scored_rows(out.scored, logits_, e_.model().vocab_size);
    sink_.step_done();  // group commit: one fdatasync per step, before the step counts as done
    if (run_.first_token_s < 0 && batch.emitting() > 0) run_.first_token_s = since(e_.serving_since());
    if (out.want_emitted) sink_.logits(out.emitted_ids, out.emitted, e_.model().vocab_size);
    const double step_s = since(step_start);
    if (prompt_tokens > 0) {
      run_.prefill_seconds += step_s;
      run_.prefill_tokens += prompt_tokens;
    } else if (batch.tokens() > 0) {
      run_.decode_seconds += step_s;
      run_.decode_tokens += batch.tokens();
    }
  }

  Engine& e_;
  const std::vector<io::Request>& requests_;
  const RouterWork& work_;
  const BatchLoopConfig& cfg_;
  ResultSink& sink_;
  RoutingStats& stats_;
  std::optional<PrefixCache> prefix_;
  std::vector<float> logits_;
  ThroughputCounters run_;
  // This step's contribution to the next step control.
  int64_t done_ = 0, tokens_ = 0, generated_ = 0, prompt_ = 0;
  int64_t skipped_seen_ = 0;
};

BatchLoopResult run_expert_loop(Engine& e) {
  const auto start = Clock::now();
  int64_t done_total = 0;
  while (true) {
    StepControl ctl;  // expert ranks contribute zeros
    const auto t0 = Clock::now();
    ctl.reduce(e);
    e.add_idle(since(t0));
    done_total += ctl.done;
    e.requests_finished(done_total);
    if (ctl.busy == 0) break;
    e.step_boundary();
    e.serve_step(ctl.micro_batches(e));
  }
  BatchLoopResult out;
  out.seconds = since(start);
  return out;
}

}  // namespace

BatchLoopResult run_batch_loop(Engine& engine, const std::vector<io::Request>& requests, const RouterWork& work, const BatchLoopConfig& cfg,
                               ResultSink& sink, RoutingStats& stats) {
  if (!engine.is_router()) return run_expert_loop(engine);
  return RouterLoop(engine, requests, work, cfg, sink, stats).run();
}

}  // namespace moerun::runtime

// Single-process inference driver.
#include "runtime/infer.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "base/log.hpp"
#include "experts/resident_experts.hpp"
#include "io/expert_shards.hpp"
#include "io/model_file.hpp"
#include "io/result_journal.hpp"
#include "io/routing_trace.hpp"
#include "runtime/model_forward.hpp"
#include "runtime/moe_layer.hpp"
#include "runtime/progress.hpp"
#include "runtime/routing_stats.hpp"

namespace moerun::runtime {

void InferConfig::validate() const {
  if (model_dir.empty()) fail(ErrorKind::Usage, "--model is required");
  if (input.empty()) fail(ErrorKind::Usage, "--input is required");
  if (output.empty()) fail(ErrorKind::Usage, "--output is required");
  if (defaults.max_new_tokens < 0) fail(ErrorKind::Usage, "--max-new-tokens must be >= 0");
  if (!(defaults.temperature >= 0)) fail(ErrorKind::Usage, "--temperature must be >= 0");
  if (!(defaults.top_p > 0 && defaults.top_p <= 1)) fail(ErrorKind::Usage, "--top-p must be in (0, 1]");
  scheduler.validate();
  router.validate();
}

InferReport run_infer(const InferConfig& cfg) {
  cfg.validate();
  // Everything that can be validated is, before any file is written.
  const io::ModelConfig mc = io::read_model_config(cfg.model_dir);
  std::vector<io::Request> requests =
      io::read_requests(cfg.input, cfg.defaults, {mc.vocab_size, mc.max_position}, cfg.skip_invalid);
  io::check_writable(cfg.output);
  if (!cfg.stats_json.empty()) io::check_writable(cfg.stats_json);
  if (!cfg.trace.empty()) io::check_writable(cfg.trace);
  const io::ExpertShardIndex index = io::ExpertShardIndex::build(cfg.model_dir, mc);
  const io::DenseWeights dense = io::load_dense_weights(cfg.model_dir, cfg.check_weights);
  Matmul mm;
  const experts::ResidentExperts experts(index, mc, [](int64_t, int64_t) { return true; }, cfg.check_weights, mm);
  log::info("model ", cfg.model_dir, ": ", mc.num_layers, " layers, ", mc.num_experts, " experts (top-", mc.top_k, "), d=",
            mc.hidden_size, ", ", dtype_name(mc.dtype), ", ", (mc.total_params() * static_cast<int64_t>(dtype_size(mc.dtype))) >> 20,
            " MiB");

  io::ResultJournal journal(cfg.output, cfg.resume);
  std::vector<int64_t> pending;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const io::Request& r = requests[i];
    if (journal.finished().count(r.id)) continue;
    if (!r.error.empty()) {
      journal.append({r.id, {}, "", 0, str("line ", r.line, ": ", r.error)});
      continue;
    }
    pending.push_back(static_cast<int64_t>(i));
  }

  LocalMoeLayer moe(mm, experts, mc.hidden_size, mc.num_experts);
  ModelForward model(dense, mm, moe, cfg.router);
  RoutingStats stats(mc, !cfg.trace.empty());
  Scheduler sched(cfg.scheduler, mc, requests, pending);
  for (const io::Result& r : sched.take_trivial()) journal.append(r);

  InferReport rep;
  const int64_t total = static_cast<int64_t>(requests.size());
  int64_t done = static_cast<int64_t>(journal.finished().size());
  Progress progress(total, cfg.quiet);
  std::vector<float> logits, logits_log;
  std::vector<std::string> logits_ids;
  std::vector<float>* log_ptr = cfg.logits_out.empty() ? nullptr : &logits_log;
  std::ofstream logits_file;
  if (log_ptr) {
    io::check_writable(cfg.logits_out);
    logits_file.open(cfg.logits_out + ".tmp");
  }
  while (!sched.done()) {
    StepBatch batch = sched.next_step();
    model.forward(batch, logits, &stats);
    rep.processed_tokens += batch.tokens();
    rep.generated_tokens += batch.emitting();
    logits_log.clear();
    logits_ids.clear();
    for (const io::Result& r : sched.complete_step(logits, log_ptr, &logits_ids)) {
      journal.append(r);
      ++done;
    }
    for (std::size_t i = 0; i < logits_ids.size(); ++i) {
      nlohmann::json j;
      j["id"] = logits_ids[i];
      j["logits"] = std::vector<float>(logits_log.begin() + static_cast<int64_t>(i) * mc.vocab_size,
                                       logits_log.begin() + static_cast<int64_t>(i + 1) * mc.vocab_size);
      logits_file << j.dump() << '\n';
    }
    progress.update(done, rep.processed_tokens);
  }
  progress.finish(done, rep.processed_tokens);
  rep.seconds = progress.elapsed();
  rep.requests = total;

  // Final output: every request once, in input order, written atomically.
  std::vector<std::string> lines;
  lines.reserve(requests.size());
  for (const io::Request& r : requests) {
    auto it = journal.finished().find(r.id);
    if (it == journal.finished().end()) fail(ErrorKind::Internal, "request ", r.id, " has no result");
    lines.push_back(io::result_to_json(it->second));
  }
  io::write_file_atomically(cfg.output, lines);
  journal.remove();
  if (log_ptr) {
    logits_file.close();
    if (std::rename((cfg.logits_out + ".tmp").c_str(), cfg.logits_out.c_str()) != 0)
      fail(ErrorKind::Io, cfg.logits_out, ": cannot rename into place");
  }

  const double tps = rep.seconds > 0 ? static_cast<double>(rep.processed_tokens) / rep.seconds : 0;
  if (!cfg.quiet) std::fputs(stats.summary(tps).c_str(), stderr);
  if (!cfg.stats_json.empty()) io::write_file_atomically(cfg.stats_json, {stats.to_json(tps, rep.seconds)});
  if (!cfg.trace.empty()) io::write_routing_trace(cfg.trace, stats.trace());
  return rep;
}

}  // namespace moerun::runtime

// The Job of `moerun infer`: set-up steps agreed across ranks, the batch loop on the engine with
// the journal as its result sink, then rank 0's output, summary and stats.
#include "runtime/infer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sys/stat.h>
#include <unordered_map>

#include "base/log.hpp"
#include "comm/collectives.hpp"
#include "comm/counter_reduction.hpp"
#include "comm/mpi.hpp"
#include "io/input_file.hpp"
#include "io/openai_batch.hpp"
#include "io/output_file.hpp"
#include "io/output_lock.hpp"
#include "io/result_journal.hpp"
#include "io/routing_trace.hpp"
#include "runtime/resume_keys.hpp"
#include "runtime/stats_json.hpp"

namespace moerun::runtime {
namespace {

std::string per_router(const std::string& path, int router) {
  return router == 0 ? path : path + "." + std::to_string(router);
}

std::string named(const InferConfig& cfg, const std::string& field) {
  return cfg.option_name ? cfg.option_name(field) : field;
}

// The router's results: appended to its journal, committed once per step; logits to LOGITS.N.
class JournalSink final : public ResultSink {
 public:
  JournalSink(const InferConfig& cfg, int router, const io::JournalKeys& keys) : journal_(cfg.output, router, cfg.resume, keys) {
    if (!cfg.logits_out.empty()) logits_file_.emplace(per_router(cfg.logits_out, router));
  }
  const io::ResultJournal& journal() const { return journal_; }
  void result(const io::Result& r) override { journal_.append(r); }
  void step_done() override { journal_.sync(); }
  bool wants_logits() const override { return logits_file_.has_value(); }
  void logits(const std::vector<std::string>& ids, const std::vector<float>& logits, int64_t V) override {
    std::string text;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      nlohmann::json j;
      j["id"] = ids[i];
      j["logits"] = std::vector<float>(logits.begin() + static_cast<int64_t>(i) * V, logits.begin() + static_cast<int64_t>(i + 1) * V);
      text += j.dump();
      text += '\n';
    }
    logits_file_->write(text);
  }
  JournalCounters close() {
    journal_.close();
    if (logits_file_) logits_file_->commit();
    return {journal_.appended(), journal_.syncs()};
  }

 private:
  io::ResultJournal journal_;
  std::optional<io::AtomicFile> logits_file_;
};

// The model directory's tokenizer, for text prompts and text results.
std::unique_ptr<io::Tokenizer> open_model_tokenizer(const InferConfig& cfg) {
  const std::string& model = cfg.engine.model;
  if (io::is_s3_url(model))
    fail(ErrorKind::Usage, cfg.input, ": requests with \"prompt\" text need a local model directory with its tokenizer (", model,
         " is in an object store); give prompt_tokens");
  auto tok = io::open_tokenizer(model, cfg.tokenizer);
  if (!tok)
    fail(ErrorKind::BadInput, cfg.input, ": requests give \"prompt\" text, but ", model,
         " has no tokenizer (tokenizer.json or tokenizer.model; moerun convert copies them from a Hugging Face directory)");
  return tok;
}

std::vector<io::PathUse> output_uses(const InferConfig& cfg) {
  auto use = [&](const std::string& path, const char* field) { return io::PathUse{path, named(cfg, field)}; };
  std::vector<io::PathUse> outputs{use(cfg.output, "output")};
  if (!cfg.stats_json.empty()) outputs.push_back(use(cfg.stats_json, "stats_json"));
  if (!cfg.trace.empty()) outputs.push_back(use(cfg.trace, "trace"));
  if (!cfg.logits_out.empty()) outputs.push_back(use(cfg.logits_out, "logits_out"));
  return outputs;
}

// Before anything is created (the lock, the L2 directory): every output is a regular file or new,
// and none is the L2 directory.
void check_output_names(const InferConfig& cfg) {
  const std::string l2 = cfg.engine.cache.l2_dir;
  for (const auto& o : output_uses(cfg)) {
    if (!l2.empty() && std::filesystem::absolute(o.path).lexically_normal() == std::filesystem::absolute(l2).lexically_normal())
      fail(ErrorKind::Usage, o.option, " ", o.path, " is the ", named(cfg, "engine.cache.l2_dir"), " directory; choose another");
    io::check_output_target(o.path, o.option);
  }
}

// None of the outputs is an input or another output.
void check_outputs(const InferConfig& cfg, const io::ModelLocation& model) {
  auto use = [&](const std::string& path, const char* field) { return io::PathUse{path, named(cfg, field)}; };
  const std::vector<io::PathUse> outputs = output_uses(cfg);
  std::vector<io::PathUse> inputs{use(cfg.input, "input")};
  for (const auto& f : model.input_files()) inputs.push_back(use(f, "engine.model"));
  const EngineConfig& e = cfg.engine;
  if (!e.affinity.empty()) inputs.push_back(use(e.affinity, "engine.affinity"));
  if (!e.placement_file.empty()) inputs.push_back(use(e.placement_file, "engine.placement_file"));
  if (!e.swap_control.empty()) inputs.push_back(use(e.swap_control, "engine.swap_control"));
  io::check_distinct_paths(inputs, outputs);
}

// What the routers take from the tokenizer before the run, with one helper process: the prompts'
// tokens (in the requests), the time it took, and each token id's bytes when a request has stop
// strings (SchedulerConfig::token_bytes).
struct Tokenized {
  InferReport::Tokenize timing;
  std::shared_ptr<const std::vector<std::string>> token_bytes;
};

// Parses the requests every rank received; routers tokenize text prompts (expert ranks never
// look at prompts) and check the outputs.
// An OpenAI batch file (io/openai_batch.hpp) always keeps its bad lines as error lines.
std::vector<io::Request> take_requests(const InferConfig& cfg, const Engine& engine, std::string& text, Tokenized& tokenized) {
  InferReport::Tokenize& timing = tokenized.timing;
  const model::ModelConfig& mc = engine.model();
  const io::RequestLimits lim{mc.vocab_size, mc.max_position};
  const bool openai = io::is_openai_batch(text);
  std::set<std::string> ignored;
  auto requests = openai ? io::parse_openai_batch(text, cfg.input, cfg.defaults, lim, ignored)
                         : io::parse_requests(text, cfg.input, cfg.defaults, lim, cfg.skip_invalid);
  text = std::string();
  if (engine.rank() == 0)
    for (const std::string& f : ignored) log::warn(cfg.input, ": body field ", f, " is ignored (moerun does not use it)");
  if (engine.is_router() && io::any_text_prompt(requests)) {
    const auto start = std::chrono::steady_clock::now();
    for (const io::Request& r : requests)
      if (r.has_text && r.error.empty()) ++(r.prompt_text.empty() ? timing.chat_prompts : timing.text_prompts);
    const auto tok = open_model_tokenizer(cfg);
    io::tokenize_prompts(requests, cfg.input, lim, cfg.skip_invalid || openai,
                         [&](const std::vector<std::string>& t) { return tok->encode(t); });
    io::render_chat_prompts(requests, lim, [&](const std::vector<io::ChatPrompt>& p) { return tok->encode_chat(p, lim.max_position); });
    timing.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Stop strings end generation as they appear: the routers follow the generated bytes.
    if (std::any_of(requests.begin(), requests.end(), [](const io::Request& r) { return !r.stop.empty() && r.error.empty(); }))
      tokenized.token_bytes = std::make_shared<const std::vector<std::string>>(tok->token_bytes());
  }
  if (engine.is_router()) check_outputs(cfg, engine.location());
  return requests;
}

// This router's share: the requests no journal has finished, split among the routers.
RouterWork router_work(const InferConfig& cfg, const Engine& engine, const std::vector<io::Request>& requests,
                       const io::ResultJournal& journal) {
  RouterWork w;
  w.total_requests = static_cast<int64_t>(requests.size());
  std::vector<int64_t> pending;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const io::Request& r = requests[i];
    if (journal.finished().count(r.id)) {
      ++w.done_before;
      continue;
    }
    pending.push_back(static_cast<int64_t>(i));
    w.token_budget += static_cast<int64_t>(r.prompt_tokens.size()) + r.max_new_tokens;
  }
  if (engine.rank() == 0 && cfg.resume && !cfg.quiet)
    log::info("resume: ", w.done_before, " finished request(s) in ", cfg.output, ".journal*");
  const int64_t prefix_block = cfg.prefix_cache.max_bytes > 0 ? cfg.prefix_cache.block_tokens : 0;
  w.requests = split_requests(requests, pending, engine.routers(), prefix_block)[static_cast<std::size_t>(engine.router_index())];
  return w;
}

// The text of every token an OpenAI output's log-probs name, each id decoded alone, in one batch.
std::unordered_map<int32_t, std::string> logprob_token_texts(io::Tokenizer& tok, const std::vector<io::Request>& requests,
                                                             const std::unordered_map<std::string, io::Result>& finished) {
  std::set<int32_t> ids;
  for (const io::Request& r : requests)
    for (const io::TokenLogprob& t : finished.at(r.id).logprobs) {
      ids.insert(t.token);
      for (const auto& [id, lp] : t.top) ids.insert(id);
    }
  std::unordered_map<int32_t, std::string> out;
  if (ids.empty()) return out;
  std::vector<std::vector<int32_t>> one;
  for (int32_t id : ids) one.push_back({id});
  const std::vector<std::string> texts = tok.decode(one);
  for (std::size_t i = 0; i < one.size(); ++i) out[one[i][0]] = texts.at(i);
  return out;
}

// The Unix time an OpenAI output's bodies carry: the input's modification time, so that a rerun or
// a --resume writes the same bytes.
int64_t input_time(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtime) : 0;
}

// Rank 0, once every journal is complete: the output in input order, text decoded in one batch.
// Returns how many valid requests ended with an error (non-finite values in the forward).
int64_t write_output(const InferConfig& cfg, const std::vector<io::Request>& requests, const io::JournalKeys& keys) {
  auto finished = io::read_journals(cfg.output, keys);
  int64_t failed = 0;
  std::vector<io::Result*> texts;
  std::vector<std::vector<int32_t>> text_ids;
  for (const io::Request& r : requests) {
    auto it = finished.find(r.id);
    if (it == finished.end()) fail(ErrorKind::Internal, "request ", r.id, " has no result");
    failed += r.error.empty() && !it->second.error.empty() ? 1 : 0;
    if (r.has_text && it->second.error.empty()) {
      texts.push_back(&it->second);
      text_ids.push_back(it->second.output_tokens);
    }
  }
  std::unique_ptr<io::Tokenizer> tok;  // one helper process for the texts and the log-probs' tokens
  if (!texts.empty()) {
    tok = open_model_tokenizer(cfg);
    const std::vector<std::string> decoded = tok->decode(text_ids);
    for (std::size_t i = 0; i < texts.size(); ++i) {
      texts[i]->has_text = true;
      texts[i]->text = decoded.at(i);
    }
  }
  std::vector<std::string> lines;
  lines.reserve(requests.size());
  if (!requests.empty() && requests.front().openai) {
    const auto token_texts = tok ? logprob_token_texts(*tok, requests, finished) : std::unordered_map<int32_t, std::string>{};
    const int64_t created = input_time(cfg.input);
    for (const io::Request& r : requests)
      lines.push_back(io::openai_result_line(r, finished.at(r.id), created, token_texts, cfg.split_reasoning));
  } else {
    for (const io::Request& r : requests) lines.push_back(io::result_to_json(finished.at(r.id)));
  }
  io::write_file_atomically(cfg.output, lines);
  io::remove_journals(cfg.output);
  return failed;
}

// After set-up: serve, then gather the counters on rank 0 and finish the output there.
InferReport serve(const InferConfig& cfg, Engine& engine, const std::vector<io::Request>& requests, const io::JournalKeys& keys,
                  const Tokenized& tokenized) {
  const MPI_Comm world = engine.world();
  RoutingStats stats(engine.model(), !cfg.trace.empty());
  BatchLoopConfig loop{cfg.scheduler, cfg.prefix_cache, !cfg.quiet};
  loop.scheduler.token_bytes = tokenized.token_bytes;
  loop.scheduler.max_logit_rows = engine.logit_rows_per_step();
  InferReport rep;
  rep.requests = static_cast<int64_t>(requests.size());
  rep.tokenize = tokenized.timing;
  engine.start_serving();
  BatchLoopResult res;
  if (engine.is_router()) {
    JournalSink sink(cfg, engine.router_index(), keys);
    res = run_batch_loop(engine, requests, router_work(cfg, engine, requests, sink.journal()), loop, sink, stats);
    rep.journal = sink.close();
    if (!cfg.trace.empty()) io::write_routing_trace(per_router(cfg.trace, engine.router_index()), stats.trace());
  } else {
    NullSink none;
    res = run_batch_loop(engine, requests, {}, loop, none, stats);
  }
  rep.seconds = res.seconds;
  rep.processed_tokens = res.processed_tokens;
  rep.run = res.run;
  rep.batching = res.batching;
  rep.prefix_on = res.prefix_on;
  rep.prefix = res.prefix;
  rep.engine = engine.report();
  if (engine.distributed()) {
    std::vector<int64_t> counters = engine.is_router() ? stats.counters() : std::vector<int64_t>(stats.counters().size(), 0);
    comm::reduce_sum_to_root(counters, world);
    if (engine.rank() == 0) stats.set_counters(counters);
    comm::reduce_counters_to_root(rep.run, world);
    comm::reduce_counters_to_root(rep.journal, world);
    comm::reduce_counters_to_root(rep.prefix, world);
    comm::reduce_counters_to_root(rep.batching, world);
    comm::barrier(world);  // every journal is complete before rank 0 reads them
  }
  if (engine.rank() == 0) {
    rep.failed_requests = write_output(cfg, requests, keys);
    print_infer_summary(cfg, rep, stats);
    if (!cfg.stats_json.empty()) io::write_file_atomically(cfg.stats_json, {infer_stats_json(cfg, rep, stats)});
  }
  return rep;
}

}  // namespace

void InferConfig::validate() const {
  if (engine.model.empty()) fail_config("engine.model", "is required");
  if (input.empty()) fail_config("input", "is required");
  if (output.empty()) fail_config("output", "is required");
  if (defaults.max_new_tokens < 0) fail_config("defaults.max_new_tokens", "must be >= 0");
  if (!(defaults.temperature >= 0) || !std::isfinite(defaults.temperature))
    fail_config("defaults.temperature", "must be a finite number >= 0, not ", defaults.temperature);
  if (!(defaults.top_p > 0 && defaults.top_p <= 1)) fail_config("defaults.top_p", "must be in (0, 1]");
  validate_part("engine", [&] { engine.validate(); });
  validate_part("scheduler", [&] { scheduler.validate(); });
  validate_part("prefix_cache", [&] { prefix_cache.validate(); });
}

InferReport run_infer(const InferConfig& given, MPI_Comm world) {
  const int rank = comm::rank_of(world);
  const bool distributed = comm::size_of(world) > 1;
  const InferConfig& cfg = given;
  // Until --comm-timeout is validated, a sane one: set-up must never wait forever.
  const double t = cfg.engine.comm_timeout_s;
  const double setup_timeout = t > 0 && std::isfinite(t) ? t : 300.0;
  // 1. Set-up. Everything that can be validated is, before any output file is written.
  std::optional<io::OutputLock> output_lock;
  std::string request_text;
  agree_on_setup(world, setup_timeout, "options", [&] {
    try {
      cfg.validate();
    } catch (const ConfigError& e) {
      fail(ErrorKind::Usage, named(cfg, e.field()), " ", e.detail());
    }
    // Read at steps during the run, so a FIFO there would be found only then: refused now.
    if (!cfg.engine.swap_control.empty()) io::check_regular_file(cfg.engine.swap_control, ErrorKind::Usage);
    // One run per output: taken before anything of the output's is touched (journals, temp files).
    if (rank == 0) check_output_names(cfg);
    if (rank == 0) output_lock.emplace(cfg.output);
  });
  // One rank reads the requests (a FIFO or a pipe can be read only once), every rank parses them.
  agree_on_setup(world, setup_timeout, "requests", [&] {
    if (rank == 0) request_text = io::read_requests_text(cfg.input);
  });
  if (distributed) request_text = comm::broadcast_string_timed(request_text, world, setup_timeout, "set-up (requests)");
  EngineConfig ec = cfg.engine;
  ec.quiet = ec.quiet || cfg.quiet;
  ec.reserve_step_tokens = cfg.scheduler.max_batch_tokens;
  Engine engine(ec, world);
  std::vector<io::Request> requests;
  Tokenized tokenized;
  engine.load([&] {
    requests = take_requests(cfg, engine, request_text, tokenized);
    engine.expect_kv_tokens(max_kv_tokens(requests, cfg.scheduler, engine.model().max_position),
                            max_sequences_in_flight(requests, cfg.scheduler));
    engine.expect_prefix_cache_bytes(cfg.prefix_cache.max_bytes);
    engine.expect_decode_steps(expected_decode_steps(requests, cfg.scheduler));
    engine.expect_logit_rows(max_step_logit_rows(requests, cfg.scheduler), 1, max_sequences_in_flight(requests, cfg.scheduler) + 1);
  });
  agree_on_setup(world, setup_timeout, "outputs", [&] {
    if (rank == 0 && !cfg.resume) io::remove_journals(cfg.output);
    if (rank == 0)  // what a killed run's final writes left behind
      for (const std::string* p : {&cfg.output, &cfg.stats_json, &cfg.trace, &cfg.logits_out})
        if (!p->empty()) io::remove_stale_temp_files(*p);
  });
  const io::JournalKeys keys = journal_keys(requests, engine.run_fingerprint());

  // After set-up a failure on one rank cannot be agreed on (the others are inside collectives):
  // report it with the rank and end the whole job with its exit code, within seconds.
  try {
    return serve(cfg, engine, requests, keys, tokenized);
  } catch (const Error& e) {
    if (!distributed) throw;
    std::fprintf(stderr, "moerun: error: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    comm::MpiSession::abort(e.exit_code());
  } catch (const std::exception& e) {
    if (!distributed) throw;
    std::fprintf(stderr, "moerun: internal error: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    comm::MpiSession::abort(1);
  }
}

}  // namespace moerun::runtime

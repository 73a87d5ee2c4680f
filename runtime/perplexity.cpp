// `moerun perplexity`: windows of the text as prefill-only scoring requests on the engine, the
// scored log-probs (and KL divergences against a saved base) summed over ranks, rank 0's summary.
#include "runtime/perplexity.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/log.hpp"
#include "base/xxh64.hpp"
#include "comm/collectives.hpp"
#include "comm/mpi.hpp"
#include "io/input_file.hpp"
#include "io/json_input.hpp"
#include "io/logprob_file.hpp"
#include "io/output_file.hpp"
#include "runtime/batch_loop.hpp"
#include "runtime/log_softmax.hpp"
#include "runtime/request_split.hpp"
#include "runtime/sampling.hpp"

namespace moerun::runtime {
namespace {

using nlohmann::json;

std::string named(const PerplexityConfig& cfg, const std::string& field) {
  return cfg.option_name ? cfg.option_name(field) : field;
}

std::vector<int32_t> tokenize_text(const PerplexityConfig& cfg) {
  const std::string text = io::read_regular_file(cfg.text, ErrorKind::Usage);
  if (const int64_t bad = io::first_invalid_utf8(text); bad >= 0)
    fail(ErrorKind::BadInput, cfg.text, ": byte ", bad, " is not UTF-8 (", named(cfg, "text"), " reads UTF-8 text)");
  if (text.empty()) fail(ErrorKind::BadInput, cfg.text, ": the text is empty");
  if (io::is_s3_url(cfg.engine.model))
    fail(ErrorKind::Usage, named(cfg, "text"), " needs a local model directory with its tokenizer (", cfg.engine.model,
         " is in an object store); give ", named(cfg, "tokens"));
  const auto tok = io::open_tokenizer(cfg.engine.model, cfg.tokenizer);
  if (!tok) fail(ErrorKind::BadInput, cfg.engine.model, " has no tokenizer (tokenizer.json or tokenizer.model) for ", cfg.text);
  return tok->encode({text}).at(0);
}

std::vector<int32_t> read_token_ids(const PerplexityConfig& cfg, int64_t vocab) {
  const json j = io::parse_json(io::read_regular_file(cfg.tokens, ErrorKind::Usage), cfg.tokens);
  if (!j.is_array()) fail(ErrorKind::BadInput, cfg.tokens, ": not a JSON array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number_integer() || j[i].get<int64_t>() < 0 || j[i].get<int64_t>() >= vocab)
      fail(ErrorKind::BadInput, cfg.tokens, ": element ", i, " is ", io::json_excerpt(j[i]), ", not a token id in [0, ", vocab, ")");
    ids.push_back(static_cast<int32_t>(j[i].get<int64_t>()));
  }
  return ids;
}

// Rank 0, before any weight is read: the tokens, their windows, and the base run they must match.
std::vector<int32_t> read_scored_tokens(const PerplexityConfig& cfg, const model::ModelConfig& mc) {
  std::vector<int32_t> ids = cfg.text.empty() ? read_token_ids(cfg, mc.vocab_size) : tokenize_text(cfg);
  const std::string& src = cfg.text.empty() ? cfg.tokens : cfg.text;
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= mc.vocab_size)
      fail(ErrorKind::BadInput, src, ": the tokenizer gives token ", ids[i], " outside the model's vocabulary [0, ", mc.vocab_size, ")");
  if (cfg.context > mc.max_position)
    fail(ErrorKind::Usage, named(cfg, "context"), " ", cfg.context, " is longer than the model's max_position ", mc.max_position);
  plan_windows(static_cast<int64_t>(ids.size()), cfg.context, cfg.stride);
  return ids;
}

// A saved base run must be of the same vocabulary, tokens and windows: named when it is not.
void check_base(const PerplexityConfig& cfg, const io::LogprobHeader& h, const std::vector<int32_t>& tokens, const WindowPlan& plan,
                int64_t vocab) {
  const std::string& f = cfg.kl_base;
  if (h.vocab_size != vocab)
    fail(ErrorKind::BadInput, f, ": vocab_size ", h.vocab_size, " is not this model's ", vocab, " (saved from another model: ", h.model,
         ")");
  if (h.num_tokens != static_cast<int64_t>(tokens.size()) || h.tokens_xxh64 != io::tokens_fingerprint(tokens))
    fail(ErrorKind::BadInput, f, ": tokens differ (", h.num_tokens, " saved, ", tokens.size(),
         " here): another text or tokenization than this run's");
  if (h.context != plan.context || h.stride != plan.stride)
    fail(ErrorKind::BadInput, f, ": context ", h.context, " / stride ", h.stride, " differ from this run's ", plan.context, " / ",
         plan.stride, " (the log-probs depend on the windows)");
}

// Per scored position (slot k * per_window + j), what this router computed; zeros elsewhere, so
// that a sum over ranks assembles them.
struct SlotValues {
  std::vector<double> nll, kld, top1, base_nll, nll_f32;
  explicit SlotValues(int64_t n, bool kl)
      : nll(static_cast<std::size_t>(n)), kld(kl ? n : 0), top1(kl ? n : 0), base_nll(kl ? n : 0), nll_f32(kl ? n : 0) {}
};

// A router's windows: their log-probs into the slots; with --save-logits the rows to its part file;
// with --kl-base the divergence from the saved rows.
class ScoringSink final : public ResultSink {
 public:
  ScoringSink(const WindowPlan& plan, int64_t vocab, SlotValues& slots, io::LogprobWriter* writer, const io::LogprobBase* base)
      : plan_(plan), V_(vocab), slots_(slots), writer_(writer), base_(base) {}

  void result(const io::Result& r) override {
    const int64_t k = std::stoll(r.id.substr(1));
    // A window the model could not compute has no score: a perplexity without it would be wrong.
    if (!r.error.empty()) fail(ErrorKind::BadInput, "window ", k, " (tokens from ", plan_.start(k), "): ", r.error);
    for (std::size_t j = 0; j < r.prompt_logprobs.size(); ++j)
      slots_.nll[static_cast<std::size_t>(k * plan_.per_window() + static_cast<int64_t>(j))] = -r.prompt_logprobs[j].logprob;
  }
  bool wants_scored_rows() const override { return writer_ || base_; }
  void scored_rows(const std::vector<ScoredRow>& rows, const std::vector<float>& logits, int64_t V) override {
    const auto n = static_cast<int64_t>(rows.size());
    ours_.resize(static_cast<std::size_t>(n * V));
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t i = 0; i < n; ++i) {
      const ScoredRow& r = rows[static_cast<std::size_t>(i)];
      log_softmax_row(logits.data() + r.row * V, V, r.lse, ours_.data() + i * V);
    }
    for (int64_t i = 0; i < n && writer_; ++i) writer_->append(position(rows[static_cast<std::size_t>(i)]), ours_.data() + i * V);
    if (base_) compare_with_base(rows);
  }

 private:
  int64_t position(const ScoredRow& r) const {
    return plan_.start(r.request) + r.target_pos;
  }
  std::size_t slot(const ScoredRow& r) const {
    return static_cast<std::size_t>(r.request * plan_.per_window() + r.target_pos - plan_.first_target);
  }
  void compare_with_base(const std::vector<ScoredRow>& rows) {
    const auto n = static_cast<int64_t>(rows.size());
    base_rows_.resize(static_cast<std::size_t>(n * V_));
    for (int64_t i = 0; i < n; ++i) base_->read(position(rows[static_cast<std::size_t>(i)]), base_rows_.data() + i * V_);
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t i = 0; i < n; ++i) {
      const ScoredRow& r = rows[static_cast<std::size_t>(i)];
      const float* b = base_rows_.data() + i * V_;
      const float* q = ours_.data() + i * V_;
      const std::size_t s = slot(r);
      slots_.kld[s] = kl_divergence(b, q, V_);
      slots_.top1[s] = argmax(b, V_) == argmax(q, V_) ? 1.0 : 0.0;
      slots_.base_nll[s] = -static_cast<double>(b[r.target]);
      slots_.nll_f32[s] = -static_cast<double>(q[r.target]);
    }
  }

  const WindowPlan& plan_;
  int64_t V_;
  SlotValues& slots_;
  io::LogprobWriter* writer_;
  const io::LogprobBase* base_;
  std::vector<float> ours_, base_rows_;
};

std::vector<io::Request> window_requests(const WindowPlan& plan, const std::vector<int32_t>& tokens) {
  std::vector<io::Request> out(static_cast<std::size_t>(plan.windows));
  for (int64_t k = 0; k < plan.windows; ++k) {
    io::Request& r = out[static_cast<std::size_t>(k)];
    r.id = "w" + std::to_string(k);
    const auto first = tokens.begin() + plan.start(k);
    r.prompt_tokens.assign(first, first + plan.context);
    r.max_new_tokens = 0;
    r.prompt_logprobs = 0;
    r.score_from = plan.first_target;
    r.line = k + 1;
  }
  return out;
}

}  // namespace

WindowPlan plan_windows(int64_t tokens, int64_t context, int64_t stride) {
  WindowPlan p;
  p.context = context;
  p.stride = stride > 0 ? stride : context;
  p.first_target = std::max(context / 2, context - p.stride);
  if (tokens < context) fail(ErrorKind::Usage, "the text has ", tokens, " tokens, fewer than one window (--context ", context, ")");
  p.windows = (tokens - context) / p.stride + 1;
  return p;
}

void PerplexityConfig::validate() const {
  if (engine.model.empty()) fail_config("engine.model", "is required");
  if (text.empty() == tokens.empty()) fail_config("text", "(a text file) or the tokens (a JSON file of ids) is required, one of them");
  if (context < 2 || context > (int64_t{1} << 20)) fail_config("context", "must be in [2, 2^20], not ", context);
  if (stride < 0 || stride > context) fail_config("stride", "must be in [1, --context], or 0 for --context; not ", stride);
  validate_part("engine", [&] { engine.validate(); });
  validate_part("scheduler", [&] { scheduler.validate(); });
}

void summarize_nll(const std::vector<double>& nll, PerplexityReport& rep) {
  const auto n = static_cast<double>(nll.size());
  double sum = 0, sum2 = 0;
  for (double x : nll) sum += x, sum2 += x * x;
  rep.tokens = static_cast<int64_t>(nll.size());
  rep.nll = n > 0 ? sum / n : 0;
  rep.perplexity = std::exp(rep.nll);
  // llama-perplexity's: the standard error of the mean NLL, carried through exp (d ppl = ppl d nll).
  const double var = n > 1 ? std::max(0.0, sum2 / n - rep.nll * rep.nll) : 0;
  rep.stderr_ = n > 1 ? rep.perplexity * std::sqrt(var / (n - 1)) : 0;
}

KlReport summarize_kl(const std::vector<double>& kld, const std::vector<double>& top1, const std::vector<double>& base_nll,
                      double perplexity) {
  KlReport k;
  k.tokens = static_cast<int64_t>(kld.size());
  if (kld.empty()) return k;
  const auto n = static_cast<double>(kld.size());
  double sum = 0, sum2 = 0, agree = 0, base = 0;
  for (std::size_t i = 0; i < kld.size(); ++i) {
    sum += kld[i], sum2 += kld[i] * kld[i], agree += top1[i], base += base_nll[i];
  }
  k.mean = sum / n;
  k.mean_stderr = n > 1 ? std::sqrt(std::max(0.0, sum2 / n - k.mean * k.mean) / (n - 1)) : 0;
  k.top1 = agree / n;
  k.base_perplexity = std::exp(base / n);
  k.perplexity_ratio = perplexity / k.base_perplexity;
  std::vector<double> sorted = kld;
  std::sort(sorted.begin(), sorted.end());
  // Nearest rank, as llama-perplexity's percentiles.
  auto at = [&](double q) { return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(q * (n - 1) + 0.5))]; };
  k.median = at(0.5);
  k.p99 = at(0.99);
  k.max = sorted.back();
  return k;
}

namespace {

std::string report_json(const PerplexityConfig& cfg, const PerplexityReport& r) {
  json j{{"perplexity", r.perplexity},
         {"stderr", r.stderr_},
         {"nll", r.nll},
         {"tokens", r.tokens},
         {"processed_tokens", r.processed},
         {"windows", r.plan.windows},
         {"context", r.plan.context},
         {"stride", r.plan.stride},
         {"first_target", r.plan.first_target},
         {"seconds", r.seconds},
         {"tokens_per_second", r.seconds > 0 ? static_cast<double>(r.processed) / r.seconds : 0.0},
         {"model", cfg.engine.model}};
  if (r.kl_on)
    j["kl_divergence"] = json{{"base", cfg.kl_base},
                              {"tokens", r.kl.tokens},
                              {"mean", r.kl.mean},
                              {"mean_stderr", r.kl.mean_stderr},
                              {"median", r.kl.median},
                              {"p99", r.kl.p99},
                              {"max", r.kl.max},
                              {"top1_agreement", r.kl.top1},
                              {"base_perplexity", r.kl.base_perplexity},
                              {"perplexity_ratio", r.kl.perplexity_ratio}};
  return j.dump(2);
}

void print_report(const PerplexityReport& r) {
  std::fprintf(stderr, "perplexity: %.6f +/- %.6f over %lld tokens (%lld windows of %lld, stride %lld, scoring from %lld)\n", r.perplexity,
               r.stderr_, static_cast<long long>(r.tokens), static_cast<long long>(r.plan.windows), static_cast<long long>(r.plan.context),
               static_cast<long long>(r.plan.stride), static_cast<long long>(r.plan.first_target));
  std::fprintf(stderr, "  %lld tokens through the model in %.2f s: %.1f tokens/s\n", static_cast<long long>(r.processed), r.seconds,
               r.seconds > 0 ? static_cast<double>(r.processed) / r.seconds : 0.0);
  if (!r.kl_on) return;
  const KlReport& k = r.kl;
  std::fprintf(stderr,
               "KL divergence against the base: mean %.6g +/- %.2g, median %.6g, p99 %.6g, max %.6g\n"
               "  top-1 agreement %.4f, base perplexity %.6f, ratio %.6f\n",
               k.mean, k.mean_stderr, k.median, k.p99, k.max, k.top1, k.base_perplexity, k.perplexity_ratio);
}

// An id shared by the parts of one --save-logits run (rank 0's, broadcast).
uint64_t new_run_id() {
  return Xxh64().value(std::chrono::system_clock::now().time_since_epoch().count()).value(static_cast<int64_t>(getpid())).digest();
}

struct Shared {  // what rank 0 read, for every rank
  std::vector<int32_t> tokens;
  uint64_t run_id = 0;
};

Shared share(const Engine& engine, Shared mine, double timeout) {
  if (!engine.distributed()) return mine;
  std::string bytes(reinterpret_cast<const char*>(mine.tokens.data()), mine.tokens.size() * sizeof(int32_t));
  bytes = comm::broadcast_string_timed(bytes, engine.world(), timeout, "set-up (tokens)");
  mine.tokens.resize(bytes.size() / sizeof(int32_t));
  std::memcpy(mine.tokens.data(), bytes.data(), bytes.size());
  mine.run_id = std::stoull(comm::broadcast_string_timed(std::to_string(mine.run_id), engine.world(), timeout, "set-up (tokens)"));
  return mine;
}

}  // namespace

namespace {

void check_files(const PerplexityConfig& cfg, const io::ModelLocation& model) {
  auto use = [&](const std::string& path, const char* field) { return io::PathUse{path, named(cfg, field)}; };
  std::vector<io::PathUse> outputs;
  if (!cfg.json_out.empty()) outputs.push_back(use(cfg.json_out, "json_out"));
  if (!cfg.save_logits.empty()) outputs.push_back(use(cfg.save_logits, "save_logits"));
  for (const auto& o : outputs) io::check_output_target(o.path, o.option);
  std::vector<io::PathUse> inputs{cfg.text.empty() ? use(cfg.tokens, "tokens") : use(cfg.text, "text")};
  for (const auto& f : model.input_files()) inputs.push_back(use(f, "engine.model"));
  if (!cfg.kl_base.empty()) inputs.push_back(use(cfg.kl_base, "kl_base"));
  io::check_distinct_paths(inputs, outputs);
}

// Routers: their windows through the batch loop; the slots of every rank summed on rank 0.
PerplexityReport serve(const PerplexityConfig& cfg, Engine& engine, const Shared& shared) {
  const model::ModelConfig& mc = engine.model();
  PerplexityReport rep;
  rep.plan = plan_windows(static_cast<int64_t>(shared.tokens.size()), cfg.context, cfg.stride);
  rep.processed = rep.plan.windows * rep.plan.context;
  rep.kl_on = !cfg.kl_base.empty();
  const std::vector<io::Request> windows = window_requests(rep.plan, shared.tokens);
  SlotValues slots(rep.plan.scored(), rep.kl_on);
  RoutingStats stats(mc, false);
  BatchLoopConfig loop{cfg.scheduler, {}, !cfg.quiet, false};  // a failed window is the run's one error line
  loop.scheduler.max_logit_rows = engine.logit_rows_per_step();
  engine.start_serving();
  BatchLoopResult res;
  if (engine.is_router()) {
    std::optional<io::LogprobBase> base;
    if (rep.kl_on) base.emplace(cfg.kl_base);
    std::optional<io::LogprobWriter> writer;
    if (!cfg.save_logits.empty()) {
      const int r = engine.router_index();
      const io::LogprobHeader h{mc.vocab_size,
                                rep.plan.context,
                                rep.plan.stride,
                                static_cast<int64_t>(shared.tokens.size()),
                                io::tokens_fingerprint(shared.tokens),
                                shared.run_id,
                                r,
                                engine.routers(),
                                cfg.engine.model};
      writer.emplace(r == 0 ? cfg.save_logits : cfg.save_logits + "." + std::to_string(r), h, shared.tokens);
    }
    std::vector<int64_t> all(windows.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    RouterWork work;
    work.requests = split_requests(windows, all, engine.routers())[static_cast<std::size_t>(engine.router_index())];
    work.total_requests = rep.plan.windows;
    work.token_budget = rep.processed;
    ScoringSink sink(rep.plan, mc.vocab_size, slots, writer ? &*writer : nullptr, base ? &*base : nullptr);
    res = run_batch_loop(engine, windows, work, loop, sink, stats);
    if (writer) writer->finish();
  } else {
    NullSink none;
    res = run_batch_loop(engine, windows, {}, loop, none, stats);
  }
  rep.seconds = res.seconds;
  engine.report();  // collective (its phases are not part of this summary)
  if (engine.distributed()) {
    for (std::vector<double>* v : {&slots.nll, &slots.kld, &slots.top1, &slots.base_nll, &slots.nll_f32})
      comm::reduce_sum_to_root(*v, engine.world());
    rep.seconds = static_cast<double>(comm::allreduce_max(static_cast<int64_t>(rep.seconds * 1e6), engine.world())) / 1e6;
  }
  if (engine.rank() != 0) return rep;
  summarize_nll(slots.nll, rep);
  if (rep.kl_on) {
    // The ratio from the float32 rows of both runs: exactly 1 for a model against itself.
    PerplexityReport f32;
    summarize_nll(slots.nll_f32, f32);
    rep.kl = summarize_kl(slots.kld, slots.top1, slots.base_nll, f32.perplexity);
  }
  if (!cfg.quiet) print_report(rep);
  if (!cfg.json_out.empty()) io::write_file_atomically(cfg.json_out, {report_json(cfg, rep)});
  return rep;
}

}  // namespace

PerplexityReport run_perplexity(const PerplexityConfig& cfg, MPI_Comm world) {
  const int rank = comm::rank_of(world);
  const double t = cfg.engine.comm_timeout_s;
  const double setup_timeout = t > 0 && std::isfinite(t) ? t : 300.0;
  agree_on_setup(world, setup_timeout, "options", [&] {
    try {
      cfg.validate();
    } catch (const ConfigError& e) {
      fail(ErrorKind::Usage, named(cfg, e.field()), " ", e.detail());
    }
  });
  EngineConfig ec = cfg.engine;
  ec.quiet = ec.quiet || cfg.quiet;
  ec.reserve_step_tokens = cfg.scheduler.max_batch_tokens;
  Engine engine(ec, world);
  Shared mine;
  engine.load([&] {
    engine.expect_kv_tokens(cfg.scheduler.max_batch_size * cfg.context, cfg.scheduler.max_batch_size);
    // Per scored row: its logits, and with --save-logits or --kl-base its log-softmax, with --kl-base the base row.
    const int64_t copies = 1 + (cfg.save_logits.empty() && cfg.kl_base.empty() ? 0 : 1) + (cfg.kl_base.empty() ? 0 : 1);
    engine.expect_logit_rows(cfg.scheduler.max_batch_tokens, copies, cfg.scheduler.max_batch_size + 1);
    if (engine.is_router()) check_files(cfg, engine.location());
    if (rank != 0) return;
    mine.tokens = read_scored_tokens(cfg, engine.model());
    mine.run_id = new_run_id();
    if (!cfg.kl_base.empty()) {
      io::require_input_file(cfg.kl_base, named(cfg, "kl_base"));
      std::vector<std::string> files{cfg.kl_base};
      cfg.engine.hdf5_probe.check(files);
      const io::LogprobBase base(cfg.kl_base);
      check_base(cfg, base.header(), mine.tokens, plan_windows(static_cast<int64_t>(mine.tokens.size()), cfg.context, cfg.stride),
                 engine.model().vocab_size);
    }
    if (!cfg.save_logits.empty()) io::remove_stale_temp_files(cfg.save_logits);
    if (!cfg.json_out.empty()) io::remove_stale_temp_files(cfg.json_out);
  });
  const Shared shared = share(engine, std::move(mine), setup_timeout);
  try {
    return serve(cfg, engine, shared);
  } catch (const Error& e) {
    if (!engine.distributed()) throw;
    std::fprintf(stderr, "moerun: error: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    comm::MpiSession::abort(e.exit_code());
  }
}

}  // namespace moerun::runtime

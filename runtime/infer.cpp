// Inference driver: set-up agreed across ranks, the router and expert loops, final output.
#include "runtime/infer.hpp"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <climits>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <omp.h>
#include <optional>
#include <thread>

#include "base/log.hpp"
#include "comm/alltoallv.hpp"
#include "comm/collective_deadline.hpp"
#include "comm/collectives.hpp"
#include "comm/exchange_select.hpp"
#include "comm/mpi.hpp"
#include "comm/topology.hpp"
#include "experts/placement.hpp"
#include "experts/resident_experts.hpp"
#include "io/expert_shards.hpp"
#include "io/input_file.hpp"
#include "io/model_file.hpp"
#include "io/output_file.hpp"
#include "io/output_lock.hpp"
#include "io/result_journal.hpp"
#include "io/routing_trace.hpp"
#include "runtime/distributed_moe.hpp"
#include "runtime/hot_swap.hpp"
#include "runtime/model_forward.hpp"
#include "runtime/moe_layer.hpp"
#include "runtime/progress.hpp"
#include "runtime/resume_keys.hpp"
#include "runtime/routing_stats.hpp"

namespace moerun::runtime {
namespace {

// Runs `f` on every rank; if any rank failed, the lowest failing rank throws its error (prefixed
// with its rank when it is not rank 0) and every other rank throws ReportedError with that code.
// The agreement has a deadline (timeout_s): a rank that never arrives (stopped, dead, or slower
// than --comm-timeout) ends the job with a Comm error naming it. `what` names the step.
template <typename F>
void agreed(MPI_Comm world, double timeout_s, const char* what, F&& f) {
  int64_t code = 0;
  std::string msg;
  try {
    f();
  } catch (const ReportedError& e) {
    code = e.exit_code();
  } catch (const Error& e) {
    code = e.exit_code();
    msg = e.what();
  } catch (const std::bad_alloc&) {
    code = 1;
    msg = "out of memory";
  } catch (const std::exception& e) {
    code = 1;
    msg = e.what();
  }
  if (comm::size_of(world) == 1) {
    if (code) throw Error(static_cast<ErrorKind>(code), msg);
    return;
  }
  const std::string step = str("set-up (", what, ")");
  const comm::FailureAgreement a = comm::agree_on_failure(code, code && !msg.empty(), world, timeout_s, step);
  if (a.code == 0) return;
  const int rank = comm::rank_of(world);
  const int64_t reporter = a.reporter;
  const ErrorKind kind = static_cast<ErrorKind>(a.reporter_code ? a.reporter_code : 1);
  // The reporter prints before anyone exits: mpirun kills the job at the first non-zero exit.
  if (rank == reporter) {
    std::fprintf(stderr, "moerun: error: %s%s\n", rank == 0 ? "" : str("rank ", rank, ": ").c_str(), msg.c_str());
    std::fflush(stderr);
  }
  comm::barrier_timed(world, timeout_s, step);
  throw ReportedError(kind);
}

// The step control reduction (every rank, every step): routers still busy, requests finished,
// tokens processed, tokens generated, prompt tokens processed. Expert ranks send zeros.
constexpr std::size_t kStepControlFields = 5;

// Every rank's cache counters (zeros without a cache) to rank 0: summed and per expert rank.
void gather_cache_counters(const experts::ExpertCache* cache, MPI_Comm world, InferReport& rep) {
  std::vector<double> mine = cache ? cache->counters().to_vector() : experts::CacheCounters{}.to_vector();
  const std::size_t n = mine.size();
  mine.push_back(cache ? 1.0 : 0.0);
  const std::vector<double> all = comm::size_of(world) > 1 ? comm::gather_to_root(mine, world) : mine;
  for (std::size_t r = 0; r * (n + 1) < all.size(); ++r) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(r * (n + 1));
    if (first[static_cast<std::ptrdiff_t>(n)] == 0) continue;
    const auto c = experts::CacheCounters::from_vector(std::vector<double>(first, first + static_cast<std::ptrdiff_t>(n)));
    rep.cache_on = true;
    rep.cache_per_rank[static_cast<int>(r)] = c;
    rep.cache.add(c);
  }
}

nlohmann::json cache_json(const experts::CacheCounters& c) {
  return {{"l1_hit_rate", c.l1_hit_rate()}, {"l2_hit_rate", c.l2_hit_rate()}, {"stall_s", c.stall_s},
          {"prefetch_precision", c.prefetch_precision()}, {"prefetch_recall", c.prefetch_recall()},
          {"l1_hits", c.l1_hits}, {"l1_misses", c.l1_misses}, {"l2_hits", c.l2_hits}, {"l2_misses", c.l2_misses},
          {"l3_reads", c.l3_reads}, {"l2_bytes_read", c.l2_bytes_read}, {"l3_bytes_read", c.l3_bytes_read},
          {"l2_bytes_written", c.l2_bytes_written}, {"l2_corrupt", c.l2_corrupt}, {"prefetch_issued", c.prefetch_issued},
          {"prefetch_used", c.prefetch_used}, {"prefetch_wasted", c.prefetch_wasted}, {"demand_loads", c.demand_loads},
          {"evictions", c.evictions}, {"warmup_loads", c.warmup_loads}, {"warmup_used", c.warmup_used}, {"load_read_s", c.read_s}, {"load_verify_s", c.verify_s}, {"load_pack_s", c.pack_s}};
}

std::string cache_summary(const experts::CacheCounters& c) {
  return str("expert cache: L1 hit rate ", c.l1_hit_rate(), " (", c.l1_hits, "/", c.l1_hits + c.l1_misses, "), L2 hit rate ",
             c.l2_hit_rate(), ", L3 reads ", c.l3_reads, " (", c.l3_bytes_read >> 20, " MiB), stall ", c.stall_s,
             " s, prefetch precision ", c.prefetch_precision(), " recall ", c.prefetch_recall(), ", warm-up loads ", c.warmup_loads,
             " (", c.warmup_used, " used), L2 corrupt ", c.l2_corrupt);
}

std::string per_router(const std::string& path, int router) {
  return router == 0 ? path : path + "." + std::to_string(router);
}

void write_logits(io::AtomicFile& out, const std::vector<std::string>& ids, const std::vector<float>& logits, int64_t V) {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    nlohmann::json j;
    j["id"] = ids[i];
    j["logits"] = std::vector<float>(logits.begin() + static_cast<int64_t>(i) * V, logits.begin() + static_cast<int64_t>(i + 1) * V);
    text += j.dump();
    text += '\n';
  }
  out.write(text);
}

// Rank 0 walks the local HDF5 inputs in a child process (io/hdf5_probe.hpp) while the others
// sleep; a corrupt file then fails the set-up as bad input instead of crashing a rank in libhdf5.
void probe_inputs(const InferConfig& cfg, MPI_Comm world, double timeout_s) {
  std::exception_ptr failed;
  if (comm::rank_of(world) == 0) {
    try {
      std::vector<std::string> files;
      files = io::model_location(cfg.model_dir, cfg.s3).probe_files();
      if (!cfg.affinity.empty()) files.push_back(cfg.affinity);
      cfg.hdf5_probe.check(files);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  comm::barrier_timed(world, timeout_s, "set-up (HDF5 probe)");
  if (failed) std::rethrow_exception(failed);
}

// The model directory's tokenizer, for text prompts and text results.
std::unique_ptr<io::Tokenizer> open_model_tokenizer(const InferConfig& cfg) {
  if (io::is_s3_url(cfg.model_dir))
    fail(ErrorKind::Usage, cfg.input, ": requests with \"prompt\" text need a local model directory with its tokenizer (",
         cfg.model_dir, " is in an object store); give prompt_tokens");
  auto tok = io::open_tokenizer(cfg.model_dir, cfg.tokenizer);
  if (!tok)
    fail(ErrorKind::BadInput, cfg.input, ": requests give \"prompt\" text, but ", cfg.model_dir,
         " has no tokenizer (tokenizer.json or tokenizer.model; moerun convert copies them from a Hugging Face directory)");
  return tok;
}

// Every output is a regular file (or new), and none of them is an input or another output.
void check_outputs(const InferConfig& cfg, const io::ModelLocation& model) {
  std::vector<io::PathUse> outputs{{cfg.output, "--output"}};
  if (!cfg.stats_json.empty()) outputs.push_back({cfg.stats_json, "--stats-json"});
  if (!cfg.trace.empty()) outputs.push_back({cfg.trace, "--trace"});
  if (!cfg.logits_out.empty()) outputs.push_back({cfg.logits_out, "--logits-out"});
  for (const auto& o : outputs) io::check_output_target(o.path, o.option);
  std::vector<io::PathUse> inputs{{cfg.input, "--input"}};
  for (const auto& f : model.local_files()) inputs.push_back({f, "--model"});
  if (!cfg.affinity.empty()) inputs.push_back({cfg.affinity, "--affinity"});
  if (cfg.placement != "round-robin") inputs.push_back({cfg.placement, "--placement"});
  if (!cfg.swap_control.empty()) inputs.push_back({cfg.swap_control, "--swap-control"});
  io::check_distinct_paths(inputs, outputs);
}

}  // namespace

void InferConfig::validate() const {
  if (model_dir.empty()) fail(ErrorKind::Usage, "--model is required");
  if (input.empty()) fail(ErrorKind::Usage, "--input is required");
  if (output.empty()) fail(ErrorKind::Usage, "--output is required");
  if (defaults.max_new_tokens < 0) fail(ErrorKind::Usage, "--max-new-tokens must be >= 0");
  if (!(defaults.temperature >= 0) || !std::isfinite(defaults.temperature))
    fail(ErrorKind::Usage, "--temperature must be a finite number >= 0, not ", defaults.temperature);
  if (!(defaults.top_p > 0 && defaults.top_p <= 1)) fail(ErrorKind::Usage, "--top-p must be in (0, 1]");
  if (micro_batches < 0 || micro_batches > 64) fail(ErrorKind::Usage, "--micro-batches must be in [1, 64], or 0 for the default");
  if (routers_per_node < 1) fail(ErrorKind::Usage, "--routers-per-node must be >= 1");
  if (ranks_per_node < 0) fail(ErrorKind::Usage, "--ranks-per-node must be >= 1 (or 0: from the MPI library)");
  if (!(comm_timeout_s > 0)) fail(ErrorKind::Usage, "--comm-timeout must be > 0 seconds");
  comm::parse_a2a(a2a);
  scheduler.validate();
  prefix_cache.validate();
  router.validate();
}

std::vector<std::vector<int64_t>> split_requests(const std::vector<io::Request>& requests,
                                                 const std::vector<int64_t>& pending, int n, int64_t prefix_block) {
  auto cost = [&](int64_t i) {
    const io::Request& r = requests[static_cast<std::size_t>(i)];
    return static_cast<int64_t>(r.prompt_tokens.size()) + r.max_new_tokens;
  };
  // Units that go to one router whole: single requests, or with a prefix cache the requests whose
  // prompts share a first block (so that a prefix is computed on one router, not on each), cut into
  // pieces of at most a fair share so that one popular prefix cannot unbalance the routers.
  std::vector<std::vector<int64_t>> units;
  if (prefix_block > 0 && n > 1) {
    int64_t total = 0;
    for (int64_t i : pending) total += cost(i);
    const int64_t fair = (total + n - 1) / n;
    std::map<std::vector<int32_t>, std::size_t> group_of;
    std::vector<std::vector<int64_t>> groups;
    for (int64_t i : pending) {
      const auto& p = requests[static_cast<std::size_t>(i)].prompt_tokens;
      // Only a prompt longer than one block can reuse one (its last token is always computed).
      if (static_cast<int64_t>(p.size()) <= prefix_block) {
        groups.push_back({i});
        continue;
      }
      const auto [it, fresh] = group_of.try_emplace(std::vector<int32_t>(p.begin(), p.begin() + prefix_block), groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(i);
    }
    for (const auto& g : groups) {
      units.emplace_back();
      int64_t c = 0;
      for (int64_t i : g) {
        if (!units.back().empty() && c + cost(i) > fair) {
          units.emplace_back();
          c = 0;
        }
        units.back().push_back(i);
        c += cost(i);
      }
    }
  } else {
    for (int64_t i : pending) units.push_back({i});
  }
  auto unit_cost = [&](const std::vector<int64_t>& u) {
    int64_t c = 0;
    for (int64_t i : u) c += cost(i);
    return c;
  };
  std::stable_sort(units.begin(), units.end(), [&](const auto& a, const auto& b) { return unit_cost(a) > unit_cost(b); });
  std::vector<std::vector<int64_t>> out(static_cast<std::size_t>(n));
  std::vector<int64_t> load(static_cast<std::size_t>(n), 0);
  for (const auto& u : units) {
    const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[r].insert(out[r].end(), u.begin(), u.end());
    load[r] += unit_cost(u);
  }
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

InferReport run_loops(const InferConfig& cfg, MPI_Comm world, const io::ModelConfig& mc,
                      const std::vector<io::Request>& requests, const comm::Topology& topo,
                      const experts::Placement& placement, const std::optional<io::DenseWeights>& dense,
                      experts::ExpertBackend* backend, const std::unique_ptr<experts::ExpertStore>& store,
                      const io::ObjectStore* object_store, const io::JournalKeys& keys, Matmul& mm) {
  const int rank = comm::rank_of(world), size = comm::size_of(world);
  const bool distributed = size > 1;
  InferReport rep;
  rep.ranks = size;
  rep.routers = static_cast<int>(topo.routers.size());
  rep.requests = static_cast<int64_t>(requests.size());
  std::unique_ptr<comm::AllToAllV> dispatch, combine;
  std::unique_ptr<MoeExchangeProtocol> protocol;
  if (distributed) {
    // Bytes a router sends per exchange at a full step, spread over the ranks: what `auto` uses.
    const int64_t per_exchange = cfg.scheduler.max_batch_tokens / cfg.micro_batches * mc.top_k *
                                 static_cast<int64_t>(MoeExchangeProtocol::dispatch_record_bytes(mc.hidden_size));
    const comm::A2aKind kind = comm::resolve_a2a(comm::parse_a2a(cfg.a2a), topo.nodes, per_exchange / size);
    const comm::CollectiveDeadline deadline(cfg.comm_timeout_s, "set-up (exchanges)", rank);
    dispatch = comm::make_alltoallv(kind, world, topo, cfg.comm_timeout_s);
    combine = comm::make_alltoallv(kind, world, topo, cfg.comm_timeout_s);
    protocol = std::make_unique<MoeExchangeProtocol>(*dispatch, *combine, topo, rank, mc.hidden_size);
    if (rank == 0 && !cfg.quiet)
      log::info("all-to-all: ", comm::a2a_name(kind),
                kind == comm::A2aKind::Hier ? str(" (shared memory in a node, ", comm::internode_transport(), " between nodes)") : "");
  }
  RoutingStats stats(mc, !cfg.trace.empty());
  std::map<std::string, double> my_phases;
  const bool router_role = topo.is_router(rank);
  // Time to first token counts from here, before the warm-up: an id-order warm-up delays it.
  const auto serve_start = std::chrono::steady_clock::now();
  auto* cache = dynamic_cast<experts::ExpertCache*>(store.get());
  if (cache) cache->warm_up();
  std::optional<HotSwap> swap;
  if (store && !cfg.swap_control.empty()) {
    swap.emplace(cfg.swap_control, mc, cfg.hdf5_probe, cfg.quiet);
    swap->start(*store);
  }

  // 2. The loops. Every step starts with one small allreduce: are any routers still busy, and how
  //    far are they (rank 0's progress line).
  Progress progress(rep.requests, 0, true);  // routers start their own, with the token budget
  if (router_role) {
    const int ri = topo.router_index(rank);
    io::ResultJournal journal(cfg.output, ri, cfg.resume, keys);
    std::vector<int64_t> pending;
    int64_t already = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      const io::Request& r = requests[i];
      if (journal.finished().count(r.id)) {
        ++already;
        continue;
      }
      pending.push_back(static_cast<int64_t>(i));
    }
    if (rank == 0 && cfg.resume && !cfg.quiet) log::info("resume: ", already, " finished request(s) in ", cfg.output, ".journal*");
    const int64_t prefix_block = cfg.prefix_cache.max_bytes > 0 ? cfg.prefix_cache.block_tokens : 0;
    const auto mine = split_requests(requests, pending, rep.routers, prefix_block)[static_cast<std::size_t>(ri)];
    std::vector<int64_t> runnable;
    int64_t done_local = 0;
    for (int64_t i : mine) {
      const io::Request& r = requests[static_cast<std::size_t>(i)];
      if (!r.error.empty()) {
        journal.append({r.id, {}, "", 0, str("line ", r.line, ": ", r.error)});
        ++done_local;
      } else {
        runnable.push_back(i);
      }
    }
    std::unique_ptr<MoeLayer> moe;
    if (distributed)
      moe = std::make_unique<DistributedMoeLayer>(*protocol, placement, mc.num_experts);
    else moe = std::make_unique<LocalMoeLayer>(*backend, *store, mc.hidden_size, mc.num_experts);
    ModelForward model(*dense, mm, *moe, cfg.router, cfg.micro_batches);
    std::optional<PrefixCache> prefix;
    if (cfg.prefix_cache.max_bytes > 0) prefix.emplace(cfg.prefix_cache, mc.num_layers, mc.num_kv_heads * mc.head_dim, mc.top_k);
    Scheduler sched(cfg.scheduler, mc, requests, runnable, prefix ? &*prefix : nullptr);
    for (const io::Result& r : sched.take_trivial()) {
      journal.append(r);
      ++done_local;
    }
    journal.sync();
    std::optional<io::AtomicFile> logits_file;
    if (!cfg.logits_out.empty()) logits_file.emplace(per_router(cfg.logits_out, ri));
    std::vector<float> logits, logits_log;
    std::vector<std::string> logits_ids;
    int64_t done_total = already, tokens_total = 0, tokens_delta = 0, generated_local = 0, generated_delta = 0;
    int64_t generated_total = 0, prompt_total = 0, prompt_delta = 0, skipped_seen = 0;
    int64_t budget = 0;
    for (int64_t i : pending) {
      const io::Request& r = requests[static_cast<std::size_t>(i)];
      budget += static_cast<int64_t>(r.prompt_tokens.size()) + r.max_new_tokens;
    }
    progress = Progress(rep.requests, budget, cfg.quiet || rank != 0);
    while (true) {
      std::vector<int64_t> ctl{sched.done() ? 0 : 1, done_local, tokens_delta, generated_delta, prompt_delta};
      static_assert(kStepControlFields == 5);
      if (distributed) comm::allreduce_sum_timed(ctl, world, cfg.comm_timeout_s, "step control");
      done_total += ctl[1];
      tokens_total += ctl[2];
      generated_total += ctl[3];
      prompt_total += ctl[4];
      done_local = tokens_delta = generated_delta = prompt_delta = 0;
      progress.update(done_total, prompt_total, generated_total);
      if (cache) cache->requests_finished(done_total);
      if (ctl[0] == 0) break;
      if (swap) swap->poll(*store);  // between steps: the last one finished on the old weights
      StepBatch batch = sched.done() ? StepBatch{} : sched.next_step();
      const auto step_start = std::chrono::steady_clock::now();
      model.forward(batch, logits, &stats);
      const int64_t prompt_tokens = batch.tokens() - batch.decode_tokens();
      tokens_delta = batch.tokens();
      // The progress line: prompt tokens processed (or taken from the prefix cache),
      const int64_t skipped = prefix ? prefix->counters().skipped_tokens : 0;
      prompt_delta = prompt_tokens + skipped - std::exchange(skipped_seen, skipped);
      generated_delta = batch.emitting();   // and tokens generated
      generated_local += batch.emitting();
      logits_log.clear();
      logits_ids.clear();
      for (const io::Result& r : sched.complete_step(logits, cfg.logits_out.empty() ? nullptr : &logits_log, &logits_ids)) {
        journal.append(r);
        ++done_local;
      }
      journal.sync();  // group commit: one fdatasync per step, before the step counts as done
      if (rep.first_token_s < 0 && batch.emitting() > 0)
        rep.first_token_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - serve_start).count();
      if (logits_file) write_logits(*logits_file, logits_ids, logits_log, mc.vocab_size);
      const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      if (prompt_tokens > 0) {
        rep.prefill_seconds += step_s;
        rep.prefill_tokens += prompt_tokens;
      } else if (batch.tokens() > 0) {
        rep.decode_seconds += step_s;
        rep.decode_tokens += batch.tokens();
      }
    }
    progress.finish(done_total, prompt_total, generated_total);
    journal.close();
    rep.journaled = journal.appended();
    rep.journal_syncs = journal.syncs();
    if (logits_file) logits_file->commit();
    if (!cfg.trace.empty()) io::write_routing_trace(per_router(cfg.trace, ri), stats.trace());
    const DensePhaseTimes& dt = model.times();
    const MoePhaseTimes& mt = moe->times();
    my_phases = {{"attention", dt.attention}, {"gate", dt.gate}, {"pack", mt.pack}, {"exchange", mt.exchange},
                 {"wait_experts", mt.wait}, {"expert_compute", mt.experts}, {"combine", mt.combine}, {"head", dt.head}};
    if (mc.shared_expert_intermediate_size > 0) my_phases["shared_expert"] = dt.shared_expert;
    rep.generated_tokens = generated_local;
    rep.processed_tokens = tokens_total;
    if (prefix) {
      rep.prefix_on = true;
      rep.prefix = prefix->counters();
    }
    rep.batching = sched.batching();
  } else {
    ExpertServer server(*protocol, *backend, *store, mc.num_experts);
    double idle = 0;
    int64_t done_total = 0;
    while (true) {
      std::vector<int64_t> ctl(kStepControlFields, 0);  // expert ranks contribute zeros
      const auto t0 = std::chrono::steady_clock::now();
      comm::allreduce_sum_timed(ctl, world, cfg.comm_timeout_s, "step control");
      idle += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      done_total += ctl[1];
      if (cache) cache->requests_finished(done_total);
      if (ctl[0] == 0) break;
      if (swap) swap->poll(*store);
      for (int64_t l = 0; l < mc.num_layers; ++l) server.serve_layer(l, cfg.micro_batches);
    }
    const MoePhaseTimes& mt = server.times();
    my_phases = {{"pack", mt.pack}, {"exchange", mt.exchange}, {"expert_compute", mt.experts}, {"idle", idle}};
  }
  rep.seconds = progress.elapsed();
  if (swap) rep.hot_swap = swap->counters();
  if (distributed) {
    HotSwapCounters& h = rep.hot_swap;
    std::vector<double> mx{static_cast<double>(h.applied), h.max_pause_ms_per_expert};
    std::vector<double> sum{static_cast<double>(h.experts), static_cast<double>(h.failed), h.load_seconds, h.pause_seconds};
    comm::reduce_max_to_root(mx, world);
    comm::reduce_sum_to_root(sum, world);
    h = {static_cast<int64_t>(mx[0]), static_cast<int64_t>(sum[0]), static_cast<int64_t>(sum[1]), sum[2], sum[3], mx[1]};
  }
  gather_cache_counters(dynamic_cast<const experts::ExpertCache*>(store.get()), world, rep);
  if (object_store) {
    // Requests this rank sent itself (HEADs, listings, expert GETs); HDF5's ros3 reads of model.h5
    // and of the shard metadata are not counted here.
    const io::ObjectStoreStats st = object_store->stats();
    std::vector<int64_t> v{static_cast<int64_t>(st.requests), static_cast<int64_t>(st.retries), static_cast<int64_t>(st.bytes)};
    if (distributed) comm::reduce_sum_to_root(v, world);
    rep.object_store = {static_cast<uint64_t>(v[0]), static_cast<uint64_t>(v[1]), static_cast<uint64_t>(v[2])};
    rep.remote_model = true;
  }

  // 3. Gather: statistics and phase times to rank 0, then the final output.
  if (distributed) {
    std::vector<int64_t> counters = router_role ? stats.counters() : std::vector<int64_t>(stats.counters().size(), 0);
    comm::reduce_sum_to_root(counters, world);
    if (rank == 0) stats.set_counters(counters);
    PrefixCacheCounters& pc = rep.prefix;
    std::vector<int64_t> gen{rep.generated_tokens, rep.journaled, rep.journal_syncs, rep.prefill_tokens, rep.decode_tokens,
                             pc.lookups, pc.hits, pc.skipped_tokens, pc.inserted_blocks, pc.evicted_blocks, pc.bytes,
                             rep.batching.batches, rep.batching.joined_similar, rep.batching.forced};
    comm::reduce_sum_to_root(gen, world);
    rep.generated_tokens = gen[0];
    rep.journaled = gen[1];
    rep.journal_syncs = gen[2];
    rep.prefill_tokens = gen[3];
    rep.decode_tokens = gen[4];
    pc = {gen[5], gen[6], gen[7], gen[8], gen[9], gen[10]};
    rep.batching.batches = gen[11];
    rep.batching.joined_similar = gen[12];
    rep.batching.forced = gen[13];
    std::vector<double> sim{rep.batching.similarity_sum};
    comm::reduce_sum_to_root(sim, world);
    rep.batching.similarity_sum = sim[0];
    // The job's first token is the earliest over routers: a max of negated times.
    std::vector<double> secs{rep.prefill_seconds, rep.decode_seconds, rep.first_token_s >= 0 ? -rep.first_token_s : -1e300};
    comm::reduce_max_to_root(secs, world);
    rep.prefill_seconds = secs[0];
    rep.decode_seconds = secs[1];
    rep.first_token_s = secs[2] > -1e299 ? -secs[2] : -1;
    for (const char* role : {"router", "expert"}) {
      static const std::vector<std::string> names{"attention", "gate", "shared_expert", "pack", "exchange", "wait_experts",
                                                  "expert_compute", "combine", "head", "idle"};
      std::vector<double> v(names.size(), 0.0);
      const bool mine = (std::string(role) == "router") == router_role;
      if (mine)
        for (std::size_t i = 0; i < names.size(); ++i) v[i] = my_phases.count(names[i]) ? my_phases[names[i]] : 0.0;
      comm::reduce_max_to_root(v, world);
      if (rank == 0)
        for (std::size_t i = 0; i < names.size(); ++i)
          if (v[i] > 0) rep.phases[role][names[i]] = v[i];
    }
    comm::barrier(world);  // every journal is complete before rank 0 reads them
  } else {
    rep.phases["router"] = my_phases;
  }
  if (rank == 0) {
    auto finished = io::read_journals(cfg.output, keys);
    // Requests that gave text get their output as text too, decoded here in one batch.
    std::vector<io::Result*> texts;
    std::vector<std::vector<int32_t>> text_ids;
    for (const io::Request& r : requests) {
      auto it = finished.find(r.id);
      if (it == finished.end()) fail(ErrorKind::Internal, "request ", r.id, " has no result");
      if (r.has_text && it->second.error.empty()) {
        texts.push_back(&it->second);
        text_ids.push_back(it->second.output_tokens);
      }
    }
    if (!texts.empty()) {
      const std::vector<std::string> decoded = open_model_tokenizer(cfg)->decode(text_ids);
      for (std::size_t i = 0; i < texts.size(); ++i) {
        texts[i]->has_text = true;
        texts[i]->text = decoded.at(i);
      }
    }
    std::vector<std::string> lines;
    lines.reserve(requests.size());
    for (const io::Request& r : requests) lines.push_back(io::result_to_json(finished.at(r.id)));
    io::write_file_atomically(cfg.output, lines);
    io::remove_journals(cfg.output);
    const double tps = rep.seconds > 0 ? static_cast<double>(rep.processed_tokens) / rep.seconds : 0;
    if (!cfg.quiet) std::fputs(stats.summary(tps).c_str(), stderr);
    if (!cfg.quiet && rep.prefill_tokens + rep.decode_tokens > 0)
      log::info("throughput: prefill ", rep.prefill_tokens, " prompt tokens in ", rep.prefill_seconds, " s (",
                rep.prefill_seconds > 0 ? static_cast<double>(rep.prefill_tokens) / rep.prefill_seconds : 0.0,
                " tokens/s), decode ", rep.decode_tokens, " tokens in ", rep.decode_seconds, " s (",
                rep.decode_seconds > 0 ? static_cast<double>(rep.decode_tokens) / rep.decode_seconds : 0.0, " tokens/s), first token after ",
                rep.first_token_s, " s");
    if (rep.cache_on && !cfg.quiet) log::info(cache_summary(rep.cache));
    if (rep.prefix_on && !cfg.quiet)
      log::info("prefix cache: ", rep.prefix.hits, " of ", rep.prefix.lookups, " prompts reused a prefix, ",
                rep.prefix.skipped_tokens, " prompt tokens not recomputed; ", rep.prefix.bytes >> 20, " MiB held, ",
                rep.prefix.evicted_blocks, " blocks evicted");
    if (rep.remote_model && !cfg.quiet)
      log::info("object store: ", rep.object_store.requests, " requests, ", rep.object_store.retries, " retries, ",
                rep.object_store.bytes >> 20, " MiB");
    if (!cfg.stats_json.empty()) {
      nlohmann::json j = nlohmann::json::parse(stats.to_json(tps, rep.seconds));
      if (rep.cache_on) {
        j["cache"] = cache_json(rep.cache);
        nlohmann::json per = nlohmann::json::object();
        for (const auto& [r, c] : rep.cache_per_rank) per[std::to_string(r)] = cache_json(c);
        j["cache_per_rank"] = per;
      }
      j["journal"] = {{"results", rep.journaled}, {"syncs", rep.journal_syncs}};
      if (cfg.scheduler.batching == Batching::MinHash) {
        const BatchingCounters& bc = rep.batching;
        j["batching"] = {{"policy", "minhash"}, {"batches", bc.batches}, {"joined_similar", bc.joined_similar},
                         {"forced", bc.forced},
                         {"mean_similarity", bc.joined_similar ? bc.similarity_sum / static_cast<double>(bc.joined_similar) : 0.0}};
      }
      if (!cfg.swap_control.empty())
        j["hot_swap"] = {{"applied", rep.hot_swap.applied}, {"experts", rep.hot_swap.experts}, {"failed", rep.hot_swap.failed},
                         {"load_seconds", rep.hot_swap.load_seconds}, {"pause_seconds", rep.hot_swap.pause_seconds},
                         {"pause_ms_per_expert", rep.hot_swap.pause_ms_per_expert()},
                         {"max_pause_ms_per_expert", rep.hot_swap.max_pause_ms_per_expert}};
      if (rep.prefix_on)
        j["prefix_cache"] = {{"lookups", rep.prefix.lookups}, {"hits", rep.prefix.hits},
                             {"skipped_prefill_tokens", rep.prefix.skipped_tokens}, {"inserted_blocks", rep.prefix.inserted_blocks},
                             {"evicted_blocks", rep.prefix.evicted_blocks}, {"bytes", rep.prefix.bytes}};
      j["throughput"] = {{"prefill_tokens", rep.prefill_tokens}, {"prefill_seconds", rep.prefill_seconds},
                         {"decode_tokens", rep.decode_tokens}, {"decode_seconds", rep.decode_seconds},
                         {"time_to_first_token_s", rep.first_token_s}};
      if (rep.remote_model)
        j["object_store"] = {{"requests", rep.object_store.requests},
                             {"retries", rep.object_store.retries},
                             {"bytes", rep.object_store.bytes}};
      io::write_file_atomically(cfg.stats_json, {j.dump(2)});
    }
  }
  return rep;
}

InferReport run_infer(const InferConfig& given, MPI_Comm world) {
  const int rank = comm::rank_of(world), size = comm::size_of(world);
  const bool distributed = size > 1;
  // Micro-batches overlap a router's attention with the experts of another rank: in one process
  // there is nothing to overlap, and a second micro-batch only reads the experts twice per step
  // (19-34% of decode time, issue 11). Distributed, 2 is what bench infer measured best.
  InferConfig cfg = given;
  if (cfg.micro_batches == 0) cfg.micro_batches = distributed ? 2 : 1;
  io::ModelConfig mc;
  std::vector<io::Request> requests;
  comm::Topology topo;
  experts::Placement placement;
  std::optional<io::DenseWeights> dense;
  std::optional<io::ModelLocation> model;
  std::unique_ptr<io::ExpertShardIndex> source;  // L3 for the cache
  std::optional<io::AffinityGraph> graph;
  std::unique_ptr<experts::ExpertBackend> backend;  // before the store, which uses it until destroyed
  std::unique_ptr<experts::ExpertStore> store;
  io::JournalKeys keys;
  Matmul mm;

  // 1. Set-up. Everything that can be validated is, before any output file is written. The steps
  // with collectives come first, in their own block: a rank that failed early would skip them and
  // leave the others in a mismatched collective.
  // Until --comm-timeout is validated, a sane one: set-up must never wait forever.
  const double setup_timeout = cfg.comm_timeout_s > 0 && std::isfinite(cfg.comm_timeout_s) ? cfg.comm_timeout_s : 300.0;
  std::optional<io::OutputLock> output_lock;
  std::string request_text;
  agreed(world, setup_timeout, "topology", [&] {
    // MPI_Comm_split_type and friends cannot time out themselves.
    const comm::CollectiveDeadline deadline(distributed ? setup_timeout : 0, "set-up (topology)", rank);
    topo = comm::build_topology(world, cfg.routers_per_node, cfg.ranks_per_node);  // throws only after its collectives
    // Ranks sharing a host split its cores: oversubscribed OpenMP threads spin against each other
    // (measured: 26 instead of 700 tokens/s with 3 ranks x 2 threads on 2 cores).
    const int local = comm::ranks_on_this_host(world);
    if (distributed && !std::getenv("OMP_NUM_THREADS"))
      omp_set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local));
  });
  agreed(world, setup_timeout, "options", [&] {
    cfg.validate();
    // Read at steps during the run, so a FIFO there would be found only then: refused now.
    if (!cfg.swap_control.empty()) io::check_regular_file(cfg.swap_control, ErrorKind::Usage);
    // One run per output: taken before anything of the output's is touched (journals, temp files).
    if (rank == 0) output_lock.emplace(cfg.output);
  });
  // One rank reads the requests (a FIFO or a pipe can be read only once), every rank parses them.
  agreed(world, setup_timeout, "requests", [&] {
    if (rank == 0) request_text = io::read_requests_text(cfg.input);
  });
  if (distributed) request_text = comm::broadcast_string_timed(request_text, world, setup_timeout, "set-up (requests)");
  agreed(world, setup_timeout, "HDF5 probe", [&] { probe_inputs(cfg, world, setup_timeout); });  // a barrier inside: every rank reaches it
  uint64_t dense_fp = 0, experts_fp = 0;
  agreed(world, setup_timeout, "model and weights", [&] {
    model = io::model_location(cfg.model_dir, cfg.s3);
    mc = io::read_model_config(*model);
    requests = io::parse_requests(request_text, cfg.input, cfg.defaults, {mc.vocab_size, mc.max_position}, cfg.skip_invalid);
    request_text = std::string();
    // Text prompts: routers tokenize them (expert ranks never look at prompts).
    if (topo.is_router(rank) && io::any_text_prompt(requests)) {
      const auto tok = open_model_tokenizer(cfg);
      io::tokenize_prompts(requests, cfg.input, {mc.vocab_size, mc.max_position}, cfg.skip_invalid,
                           [&](const std::vector<std::string>& t) { return tok->encode(t); });
    }
    placement = experts::make_placement(distributed ? cfg.placement : "round-robin", mc.num_layers, mc.num_experts, topo);
    if (topo.is_router(rank)) {
      check_outputs(cfg, *model);
      dense = io::load_dense_weights(*model);
      dense_fp = dense_fingerprint(*dense);  // of the bytes as stored, before packing
      pack_dense_weights(mm, *dense);
    }
    if (topo.is_expert(rank)) {
      source = std::make_unique<io::ExpertShardIndex>(io::ExpertShardIndex::build(*model, mc));
      experts_fp = experts_fingerprint(*source, mc);
      auto owns = [&placement, rank](int64_t l, int64_t e) { return placement.owner_of(l, e) == rank; };
      backend = experts::make_expert_backend(cfg.device, mc, mm, topo.ranks[static_cast<std::size_t>(rank)].local_rank);
      if (cfg.cache.l1_bytes > 0) {
        if (!cfg.affinity.empty()) graph = io::read_affinity_graph(cfg.affinity);
        experts::ExpertCacheConfig cc = cfg.cache;
        // Ranks sharing a host (or a shared directory) each keep their own blob file.
        if (!cc.l2_dir.empty()) cc.l2_dir += "/rank-" + std::to_string(rank);
        store = std::make_unique<experts::ExpertCache>(cc, *backend, *source, owns, graph ? &*graph : nullptr);
      } else {
        store = std::make_unique<experts::ResidentExperts>(*backend, *source, mc, owns);
      }
    }
    if (rank == 0 && !cfg.resume) io::remove_journals(cfg.output);
    if (rank == 0)  // what a killed run's final writes left behind
      for (const std::string* p : {&cfg.output, &cfg.stats_json, &cfg.trace, &cfg.logits_out})
        if (!p->empty()) io::remove_stale_temp_files(*p);
  });
  {
    const comm::CollectiveDeadline deadline(distributed ? setup_timeout : 0, "set-up (run fingerprint)", rank);
    // Routers hold the dense part's fingerprint, expert ranks the experts'; every rank gets both
    // (as 32-bit halves, so that a max over ranks that hold 0 recovers them).
    std::vector<uint64_t> parts;
    for (uint64_t fp : {dense_fp, experts_fp}) {
      const int64_t hi = distributed ? comm::allreduce_max(static_cast<int64_t>(fp >> 32), world) : static_cast<int64_t>(fp >> 32);
      const int64_t lo = distributed ? comm::allreduce_max(static_cast<int64_t>(fp & 0xffffffffu), world)
                                     : static_cast<int64_t>(fp & 0xffffffffu);
      parts.push_back(static_cast<uint64_t>(hi) << 32 | static_cast<uint64_t>(lo));
    }
    parts.push_back(routing_fingerprint(cfg.router));
    keys = journal_keys(requests, combine_fingerprints(parts));
  }
  if (rank == 0 && !cfg.quiet) {
    log::info("model ", cfg.model_dir, ": ", mc.num_layers, " layers, ", mc.num_experts, " experts (top-", mc.top_k,
              "), d=", mc.hidden_size, ", ", dtype_name(mc.dtype), ", ",
              (mc.total_params() * static_cast<int64_t>(dtype_size(mc.dtype))) >> 20, " MiB");
    if (distributed) std::fputs((topo.describe() + placement.describe()).c_str(), stderr);
  }

  // After set-up a failure on one rank cannot be agreed on (the others are inside collectives):
  // report it with the rank and end the whole job with its exit code, within seconds.
  try {
    return run_loops(cfg, world, mc, requests, topo, placement, dense, backend.get(), store, model->store(), keys, mm);
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

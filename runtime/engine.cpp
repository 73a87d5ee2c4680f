// The engine: set-up agreed across ranks, then the router and expert roles of a step.
#include "runtime/engine.hpp"

#include <cstring>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <climits>
#include <cstdio>
#include <thread>

#include "base/host.hpp"
#include "base/log.hpp"
#include "comm/collective_deadline.hpp"
#include "comm/collectives.hpp"
#include "comm/counter_reduction.hpp"
#include "comm/mpi.hpp"
#include "experts/resident_experts.hpp"
#include "io/affinity_file.hpp"
#include "io/dense_quant_cache.hpp"
#include "io/expert_index_cache.hpp"
#include "io/expert_shards.hpp"
#include "io/input_file.hpp"
#include "io/private_dir.hpp"
#include "runtime/distributed_moe.hpp"
#include "runtime/moe_layer.hpp"
#include "runtime/moe_protocol.hpp"
#include "runtime/resume_keys.hpp"

namespace moerun::runtime {

void agree_on_setup(MPI_Comm world, double timeout_s, const char* what, const std::function<void()>& f) {
  int64_t code = 0;
  std::string msg;
  try {
    f();
  } catch (const ReportedError& e) {
    code = e.exit_code();
  } catch (const Error& e) {
    if (comm::size_of(world) == 1) throw;
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
  const ErrorKind kind = static_cast<ErrorKind>(a.reporter_code ? a.reporter_code : 1);
  // The reporter prints before anyone exits: mpirun kills the job at the first non-zero exit.
  if (rank == a.reporter) {
    std::fprintf(stderr, "moerun: error: %s%s\n", rank == 0 ? "" : str("rank ", rank, ": ").c_str(), msg.c_str());
    std::fflush(stderr);
  }
  comm::barrier_timed(world, timeout_s, step);
  throw ReportedError(kind);
}

HugePages parse_huge_pages(const std::string& s) {
  if (s == "auto") return HugePages::Auto;
  if (s == "on") return HugePages::On;
  if (s == "off") return HugePages::Off;
  fail_config("huge_pages", "'", s, "': expected auto, on or off");
}

void EngineConfig::validate() const {
  if (model.empty()) fail_config("model", "is required");
  if (micro_batches < 0 || micro_batches > 64) fail_config("micro_batches", "must be in [1, 64], or 0 for the default");
  if (routers_per_node < 1) fail_config("routers_per_node", "must be >= 1");
  if (router_nodes < 0) fail_config("router_nodes", "must be >= 0 (0: routers on every node)");
  if (ranks_per_node < 0) fail_config("ranks_per_node", "must be >= 1 (or 0: from the MPI library)");
  if (!(comm_timeout_s > 0)) fail_config("comm_timeout_s", "must be > 0 seconds");
  if (transport.ucx_peer_errors < -1 || transport.ucx_peer_errors > 1)
    fail_config("transport.ucx_peer_errors", "must be 0, 1 or -1 (other hosts only), not ", transport.ucx_peer_errors);
  if (a2a == comm::A2aKind::Hier) validate_part("transport", [&] { comm::internode_transport(transport); });
  if (cache.l1_bytes > 0 && cache.prefetch == experts::PrefetchPolicy::Affinity && affinity.empty())
    fail_config("affinity", "is required for the affinity prefetch (a graph from moerun affinity build)");
  if (rebalance_every < 0) fail_config("rebalance_every", "must be >= 0 steps (0: off), not ", rebalance_every);
  if (redundant < 0) fail_config("redundant", "must be >= 0, not ", redundant);
  validate_part("router", [&] { router.validate(); });
  validate_part("cache", [&] { cache.validate(); });
}

Engine::Engine(EngineConfig cfg, MPI_Comm world) : cfg_(std::move(cfg)), world_(world), rank_(comm::rank_of(world)) {
  // Until comm_timeout_s is validated, a sane one: set-up must never wait forever.
  setup_timeout_s_ = cfg_.comm_timeout_s > 0 && std::isfinite(cfg_.comm_timeout_s) ? cfg_.comm_timeout_s : 300.0;
  // Micro-batches overlap a router's attention with the experts of another rank: in one process
  // there is nothing to overlap, and a second micro-batch only reads the experts twice per step
  // (19-34% of decode time, issue 11). Distributed, 2 is what bench infer measured best.
  if (cfg_.micro_batches == 0) cfg_.micro_batches = comm::size_of(world) > 1 ? 2 : 1;
  agree_on_setup(world_, setup_timeout_s_, "topology", [&] { naming_fields([&] { connect(); }); });
  // Rank 0 walks the HDF5 inputs in a child process (io/hdf5_probe.hpp) while the others sleep: a
  // corrupt file then fails the set-up as bad input instead of crashing a rank in libhdf5.
  agree_on_setup(world_, setup_timeout_s_, "HDF5 probe", [&] {
    std::exception_ptr failed;
    if (rank_ == 0) {
      try {
        const io::ModelLocation model = io::model_location(cfg_.model, cfg_.s3);
        std::vector<std::string> files = model.probe_files();
        // Shards whose kept index matches them are read by pread at its offsets, never opened by
        // libhdf5 (io/expert_index_cache.hpp): only model.h5 is walked.
        if (!model.remote() && !files.empty() && io::expert_index_cache_current(model.str(), model.shard_names()))
          files = {model.file("model.h5")};
        if (!cfg_.affinity.empty() && !io::is_s3_url(cfg_.affinity)) io::require_input_file(cfg_.affinity, "--affinity");
        if (!cfg_.affinity.empty()) files.push_back(cfg_.affinity);
        cfg_.hdf5_probe.check(files);
      } catch (...) {
        failed = std::current_exception();
      }
    }
    comm::barrier_timed(world_, setup_timeout_s_, "set-up (HDF5 probe)");  // every rank reaches it
    if (failed) std::rethrow_exception(failed);
  });
  agree_on_setup(world_, setup_timeout_s_, "model", [&] {
    location_ = io::model_location(cfg_.model, cfg_.s3);
    mc_ = io::read_model_config(*location_);
  });
}

Engine::~Engine() = default;

template <typename F>
void Engine::naming_fields(F&& f) const {
  try {
    f();
  } catch (const ConfigError& e) {
    if (!cfg_.option_name) throw;
    fail(ErrorKind::Usage, cfg_.option_name(e.field()), " ", e.detail());
  }
}

void Engine::connect() {
  cfg_.validate();
  const bool distributed = comm::size_of(world_) > 1;
  // MPI_Comm_split_type and friends cannot time out themselves.
  const comm::CollectiveDeadline deadline(distributed ? setup_timeout_s_ : 0, "set-up (topology)", rank_);
  topo_ = comm::build_topology(world_, cfg_.routers_per_node, cfg_.ranks_per_node, cfg_.router_nodes);  // throws only after its collectives
  // Ranks sharing a host split its cores: oversubscribed OpenMP threads spin against each other
  // (measured: 26 instead of 700 tokens/s with 3 ranks x 2 threads on 2 cores).
  const int local = comm::ranks_on_this_host(world_);
  ranks_on_host_ = local;
  if (distributed && cfg_.share_host_cores) omp_set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local));
}

void Engine::share_node_budget() {
  // A node's memory (its cgroup limit, MemAvailable, or --node-memory) is split evenly among its
  // ranks at first. A router needs less than its share once its dense part is loaded, so the node's
  // expert ranks take what the routers leave: the node's memory holds as many experts as it can.
  // Every rank takes part in the host's gather, whatever it shares: its split is a collective over
  // the world, so a rank alone on its host (ranks placed 2,1,1) that skipped it hung the others.
  if (!distributed()) return;
  constexpr int64_t kOwnBudget = -2;  // this rank keeps the budget it was given
  const bool node_wide = cfg_.memory_budget <= 0 && budget_.bytes > 0 && budget_.clamped_from.empty();
  const bool router_only = is_router() && !topo_.is_expert(rank_);
  const int64_t need = !node_wide ? kOwnBudget
                       : router_only
                           ? resident_memory_bytes() + reserved_bytes(mc_, reserved_step_tokens(), kv_tokens_, kv_sequences_, false) +
                                 prefix_cache_bytes_ + logit_bytes() + budget_margin_bytes(budget_.bytes)
                           : -1;
  const std::vector<int64_t> all = comm::allgather_on_this_host(need, world_, setup_timeout_s_, "set-up (the node's memory)");
  if (ranks_on_host_ < 2 || std::find(all.begin(), all.end(), kOwnBudget) != all.end()) return;
  int64_t routers_need = 0, experts = 0;
  for (int64_t v : all) v >= 0 ? routers_need += v : ++experts;
  const int64_t node = budget_.bytes * static_cast<int64_t>(all.size());
  if (router_only || experts == 0 || routers_need == 0 || routers_need >= node) return;
  budget_.bytes = (node - routers_need) / experts;
  budget_.source = str(budget_.source.substr(0, budget_.source.find(" / ")), " less the node's routers' ", routers_need >> 20,
                       " MiB, over ", experts, " expert rank(s)");
}

bool Engine::first_expert_rank_of_node() const {
  for (int r : topo_.experts)
    if (topo_.self(r).node == topo_.self(rank_).node) return r == rank_;
  return false;
}

void Engine::build_store(int64_t rank) {
  source_ = std::make_unique<io::ExpertShardIndex>(io::ExpertShardIndex::build(*location_, mc_));
  auto owns = [this, rank](int64_t l, int64_t e) { return placement_.holds(static_cast<int>(rank), l, e); };
  backend_ = experts::make_expert_backend({cfg_.device, cfg_.cuda_library, weight_memory_}, mc_, mm_,
                                          topo_.ranks[static_cast<std::size_t>(rank)].local_rank);
  int64_t owned = 0;
  for (int64_t l = 0; l < mc_.num_moe_layers(); ++l)
    for (int64_t e = 0; e < mc_.num_experts; ++e) owned += owns(l, e) ? 1 : 0;
  l1_bytes_ = plan_expert_memory(owned);
  if (l1_bytes_ > 0) {
    if (!cfg_.affinity.empty()) graph_ = io::read_affinity_graph(cfg_.affinity);
    experts::ExpertCacheConfig cc = cfg_.cache;
    cc.l1_bytes = l1_bytes_;
    source_->set_direct_reads(cc.l3_direct);
    // Ranks sharing a host (or a shared directory) each keep their own blob file, in a directory
    // checked as --staging is: another user's link or file planted there would be written through.
    if (!cc.l2_dir.empty()) {
      io::make_private_directory_path(cc.l2_dir, "--l2-dir");
      cc.l2_dir += "/rank-" + std::to_string(rank);
    }
    store_ = std::make_unique<experts::ExpertCache>(cc, *backend_, *source_, owns, graph_ ? &*graph_ : nullptr);
  } else {
    // The budget (auto: the cgroup limit or MemAvailable) holds every expert: no cache to use them.
    if (!cfg_.cache.l2_dir.empty() || !cfg_.affinity.empty())
      log::info("the experts are all resident: --l2-dir and --affinity are not used");
    store_ = std::make_unique<experts::ResidentExperts>(*backend_, *source_, mc_, owns);
  }
}

void Engine::quantize_dense() {
  const auto t0 = std::chrono::steady_clock::now();
  const int n = quantize_dense_weights(mm_, *dense_, cfg_.dense_scheme);
  if (n == 0) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Kept next to the model for the next start (one router writes it; a read-only directory keeps nothing).
  const bool keep = !location_->remote() && router_index() == 0 && !dense_->source_xxh64.empty();
  const std::string path = io::dense_cache_path(location_->str(), cfg_.dense_scheme);
  const bool kept = keep && io::write_dense_cache(path, cfg_.dense_scheme, *dense_, dense_->source_xxh64);
  if (router_index() == 0 && !cfg_.quiet)
    log::info("--quantize-dense: ", n, " dense matrices quantized at load in ", s, " s",
              kept ? str("; kept in ", path, " for the next start") : std::string());
}

int64_t Engine::plan_expert_memory(int64_t owned) {
  if (cfg_.cache.l1_bytes > 0) return cfg_.cache.l1_bytes;
  // Device memory is the backend's own to check; the budget is host memory.
  if (backend_->weight_memory() != MemoryKind::Host) return 0;
  ExpertMemoryNeeds n;
  n.held = resident_memory_bytes();
  if (is_router())
    n.reserved =
        reserved_bytes(mc_, reserved_step_tokens(), kv_tokens_, kv_sequences_, !distributed()) + prefix_cache_bytes_ + logit_bytes();
  n.cache_reserved = cache_loader_bytes(cfg_.cache.io_threads, static_cast<int64_t>(io::expert_raw_bytes(mc_)));
  n.expert_bytes = backend_->expert_bytes();
  n.owned_experts = owned;
  n.min_slots = mc_.top_k;
  const ExpertMemory m = split_for_experts(budget_, n);
  if (!m.resident && !cfg_.quiet && first_expert_rank_of_node()) {
    const std::string where = topo_.nodes > 1 ? str("node ", topo_.self(rank_).node, " (rank ", rank_, "): ") : std::string();
    log::info(where, describe_split(budget_, n, m, location_->str()));
  }
  if (!m.resident) bound_freed_memory();
  return m.resident ? 0 : m.l1_bytes;
}

void Engine::load_dense(uint64_t& dense_fp) {
  budget_ = resolve_memory_budget(cfg_.memory_budget, ranks_on_host_, cfg_.node_memory);
  if (!budget_.clamped_from.empty() && rank_ == 0) log::warn(budget_.clamped_from);
  logit_cap_ = logit_rows_cap(budget_, mc_.vocab_size, logit_rows_, logit_copies_, logit_floor_);
  if (!cfg_.placement_file.empty() && !distributed() && rank_ == 0)
    log::warn("--placement ", cfg_.placement_file, " is not used: in one process every expert is local");
  placement_ = cfg_.placement_file.empty() || !distributed()
                   ? experts::round_robin_placement(mc_.num_moe_layers(), mc_.num_experts, topo_)
                   : experts::placement_from_json(cfg_.placement_file, mc_.num_moe_layers(), mc_.num_experts, topo_);
  const bool huge = cfg_.huge_pages == HugePages::On || (cfg_.huge_pages == HugePages::Auto && decode_steps_ >= kHugePageSteps);
  if (huge) weight_memory_ = std::make_shared<HugePagePool>();
  if (is_router()) {
    check_dense_fits(budget_, dense_resident_bytes(mc_, cfg_.dense_scheme, !location_->remote()), location_->file("model.h5"));
    dense_ = io::load_dense_weights(*location_, cfg_.dense_scheme, weight_memory_);
    quantize_dense();
    dense_fp = dense_fingerprint(*dense_);  // of the bytes as stored (or quantized), before packing (ModelForward)
  }
}

void Engine::load_experts(uint64_t& experts_fp) {
  if (topo_.is_expert(rank_)) {
    build_store(rank_);
    experts_fp = experts_fingerprint(*source_, mc_);
  }
}

// Three agreed steps, because the node's budget is shared by a collective: a step that throws on
// one rank (a budget too small for the dense part) before a collective the others wait in would
// hold them until --comm-timeout, and the error would never be printed.
void Engine::load(const std::function<void()>& before_weights) {
  uint64_t dense_fp = 0, experts_fp = 0;
  agree_on_setup(world_, setup_timeout_s_, "requests, outputs and dense weights", [&] {
    naming_fields([&] {
      if (before_weights) before_weights();
      load_dense(dense_fp);
    });
  });
  agree_on_setup(world_, setup_timeout_s_, "the node's memory", [&] { share_node_budget(); });
  agree_on_setup(world_, setup_timeout_s_, "experts", [&] { naming_fields([&] { load_experts(experts_fp); }); });
  {
    const comm::CollectiveDeadline deadline(distributed() ? setup_timeout_s_ : 0, "set-up (run fingerprint)", rank_);
    // Routers hold the dense part's fingerprint, expert ranks the experts'; every rank gets both
    // (as 32-bit halves, so that a max over ranks that hold 0 recovers them).
    std::vector<uint64_t> parts;
    for (uint64_t fp : {dense_fp, experts_fp}) {
      const auto hi = static_cast<int64_t>(fp >> 32), lo = static_cast<int64_t>(fp & 0xffffffffu);
      parts.push_back(static_cast<uint64_t>(distributed() ? comm::allreduce_max(hi, world_) : hi) << 32 |
                      static_cast<uint64_t>(distributed() ? comm::allreduce_max(lo, world_) : lo));
    }
    parts.push_back(routing_fingerprint(cfg_.router));
    // Quantized dense matrices change the results (a part only when set: older journals still resume).
    if (cfg_.dense_scheme != WeightScheme::Plain) parts.push_back(static_cast<uint64_t>(cfg_.dense_scheme));
    run_fingerprint_ = combine_fingerprints(parts);
  }
  if (rank_ == 0 && !cfg_.quiet) {
    log::info("model ", cfg_.model, ": ", mc_.num_layers, " layers, ", mc_.num_experts, " experts (top-", mc_.top_k,
              "), d=", mc_.hidden_size, ", ", dtype_name(mc_.dtype), ", ",
              (mc_.total_params() * static_cast<int64_t>(dtype_size(mc_.dtype))) >> 20, " MiB");
    if (distributed()) std::fputs((topo_.describe() + placement_.describe()).c_str(), stderr);
    if (weights_in_huge_pages()) log::info("weights in 2 MiB pages (--huge-pages)");
  }
}

void Engine::build_exchanges() {
  const comm::CollectiveDeadline deadline(cfg_.comm_timeout_s, "set-up (exchanges)", rank_);
  dispatch_ = comm::make_alltoallv(cfg_.a2a, world_, topo_, cfg_.comm_timeout_s, cfg_.transport);
  combine_ = comm::make_alltoallv(cfg_.a2a, world_, topo_, cfg_.comm_timeout_s, cfg_.transport);
  protocol_ = std::make_unique<MoeExchangeProtocol>(*dispatch_, *combine_, topo_, rank_, mc_.hidden_size);
  routers_comm_ = comm::OwnedComm::split(world_, is_router() ? 0 : MPI_UNDEFINED, rank_);
  if (rank_ == 0 && !cfg_.quiet)
    log::info("all-to-all: ", comm::a2a_name(cfg_.a2a),
              cfg_.a2a == comm::A2aKind::Hier
                  ? str(" (shared memory in a node, ", comm::internode_transport(cfg_.transport), " between nodes)")
                  : "");
}

void Engine::start_serving() {
  if (distributed()) build_exchanges();
  // The gate prefetch's hints cost the routers a gate and each dispatch a record: sent only where an
  // expert rank's store takes them.
  std::vector<int64_t> takes_hints{store_ && store_->wants_hints() ? 1 : 0};
  if (distributed()) comm::allreduce_max_timed(takes_hints, world_, setup_timeout_s_, "whether an expert rank takes prefetch hints");
  if (is_router()) {
    if (distributed()) {
      const RouterGroup group{routers() > 1 ? routers_comm_.get() : MPI_COMM_NULL, router_index(), cfg_.comm_timeout_s,
                              experts::replica_row_granule(mc_, cfg_.device)};
      moe_ = std::make_unique<DistributedMoeLayer>(*protocol_, placement_, mc_.num_experts, group, takes_hints[0] > 0);
    } else
      moe_ = std::make_unique<LocalMoeLayer>(*backend_, *store_, mc_.hidden_size, mc_.num_experts);
    forward_ = std::make_unique<ModelForward>(*dense_, mm_, *moe_, cfg_.router, cfg_.micro_batches, cfg_.mla_attention);
    release_freed_memory();  // the plain copies the packing replaced
    if (reserved_step_tokens() > 0) reserve_step_buffers(reserved_step_tokens());
  } else {
    server_ = std::make_unique<ExpertServer>(*protocol_, *backend_, *store_, mc_.num_experts);
  }
  // Time to first token counts from here, before the warm-up: an id-order warm-up delays it.
  serving_since_ = std::chrono::steady_clock::now();
  if (auto* cache = dynamic_cast<experts::ExpertCache*>(store_.get())) cache->warm_up();
  if (!cfg_.swap_control.empty() && (store_ || distributed())) {
    swap_.emplace(cfg_.swap_control, mc_, cfg_.hdf5_probe, cfg_.quiet);
    if (distributed())
      swap_->poll_agreed(store_.get(), world_, cfg_.comm_timeout_s, true);
    else
      swap_->start(*store_);
  }
  if (distributed() && cfg_.rebalance_every > 0) start_rebalancing();
}

void Engine::start_rebalancing() {
  RebalanceConfig rc;
  rc.every = cfg_.rebalance_every;
  rc.plan.redundant = cfg_.redundant;
  rc.plan.groups = mc_.router_groups;
  rc.granule = experts::replica_row_granule(mc_, cfg_.device);
  // Resident experts: a rank holds at most what its memory does (the smallest over expert ranks).
  int64_t fits = INT64_MAX;
  if (store_ && l1_bytes_ == 0)
    if (const int64_t have = backend_->memory_bytes(); have > 0) fits = have / std::max<int64_t>(1, backend_->expert_bytes());
  fits = comm::allreduce_min(fits, world_);
  rc.plan.max_experts_per_rank = fits == INT64_MAX ? 0 : fits;
  rebalancer_ = std::make_unique<Rebalancer>(rc, topo_, rank_, world_, cfg_.comm_timeout_s, cfg_.quiet);
}

void Engine::reduce_layer_rows() {
  const int64_t L = mc_.num_moe_layers(), steps = steps_ - balanced_steps_;
  std::vector<double> busiest(static_cast<std::size_t>(steps * L), 0.0);
  if (server_) {
    const std::vector<int64_t> mine = server_->take_layer_rows();
    if (static_cast<int64_t>(mine.size()) != steps * L)
      fail(ErrorKind::Internal, "expert rank ", rank_, " served ", mine.size(), " layers in ", steps, " steps of ", L);
    for (std::size_t i = 0; i < mine.size(); ++i) busiest[i] = static_cast<double>(mine[i]);
  }
  std::vector<double> sum = busiest;
  comm::reduce_max_to_root(busiest, world_);
  comm::reduce_sum_to_root(sum, world_);
  balanced_steps_ = steps_;
  if (rank_ != 0) return;
  const std::vector<LayerRowsBalance> more = layer_balance(busiest, sum, L, static_cast<int64_t>(topo_.experts.size()));
  if (balance_.empty()) balance_.resize(more.size());
  for (std::size_t l = 0; l < more.size(); ++l) {
    balance_[l].busiest_rows += more[l].busiest_rows;
    balance_[l].mean_rows += more[l].mean_rows;
  }
}

BalanceReport Engine::balance_report() {
  BalanceReport b;
  b.on = true;
  b.expert_ranks = static_cast<int64_t>(topo_.experts.size());
  b.replicas = placement_.replicas();
  reduce_layer_rows();
  const auto* moe = dynamic_cast<const DistributedMoeLayer*>(moe_.get());
  const RebalanceCounters rc = rebalancer_ ? rebalancer_->counters() : RebalanceCounters{};
  std::vector<int64_t> counts{moe ? moe->routed().to_replicas : 0, 0, rc.moves, moe ? moe->routed().split : 0};
  if (moe)
    for (int64_t r : moe->routed().per_expert) counts[1] += r;
  comm::reduce_sum_to_root(counts, world_);
  if (rank_ != 0) return b;
  b.steps = steps_;
  b.layers = balance_;
  b.replica_rows = counts[0];
  b.routed_rows = counts[1];
  b.moves = counts[2];
  b.split_experts = counts[3];
  b.rebalances = rc.rebalances;  // the same on every rank
  b.heals = rc.heals;
  return b;
}

void Engine::reserve_step_buffers(int64_t tokens) {
  forward_->reserve(tokens);
  if (distributed()) return;  // an expert rank's rows per step depend on every router's batch
  const experts::RowBuffers rows = backend_->row_buffers(tokens * mc_.top_k);
  const std::size_t bytes = static_cast<std::size_t>(tokens * mc_.top_k * mc_.hidden_size) * sizeof(float);
  std::memset(rows.gathered, 0, bytes);
  std::memset(rows.results, 0, bytes);
}

void Engine::step_boundary() {
  if (distributed() && steps_ - balanced_steps_ == kBalanceSteps) reduce_layer_rows();
  ++steps_;
  // Between steps: the last one finished on the old weights (and the old placement).
  if (swap_) {
    if (distributed())
      swap_->poll_agreed(store_.get(), world_, cfg_.comm_timeout_s);
    else
      swap_->poll(*store_);
  }
  if (rebalancer_) {
    const auto* moe = dynamic_cast<const DistributedMoeLayer*>(moe_.get());
    static const std::vector<int64_t> none;
    rebalancer_->at_boundary(steps_, moe ? moe->routed().per_expert : none, swap_ ? &*swap_ : nullptr, placement_, store_.get());
  }
}

void Engine::requests_finished(int64_t done) {
  if (auto* cache = dynamic_cast<experts::ExpertCache*>(store_.get())) cache->requests_finished(done);
}

const std::vector<int32_t>& Engine::step_nonfinite_layers() const {
  static const std::vector<int32_t> none;
  return forward_ ? forward_->nonfinite_layers() : none;
}

int Engine::checked_micro_batches(int micro_batches) const {
  if (micro_batches == 0) return cfg_.micro_batches;
  if (micro_batches < 0 || micro_batches > cfg_.micro_batches)
    fail(ErrorKind::Internal, "a step of ", micro_batches, " micro-batches, not in [1, ", cfg_.micro_batches, "]");
  return micro_batches;
}

void Engine::step(const StepBatch& batch, std::vector<float>& logits, RoutingStats* stats, int micro_batches) {
  if (!forward_) fail(ErrorKind::Internal, "Engine::step on a rank that is not a router, or before start_serving()");
  forward_->forward(batch, logits, stats, checked_micro_batches(micro_batches));
}

void Engine::serve_step(int micro_batches) {
  if (!server_) fail(ErrorKind::Internal, "Engine::serve_step on a rank that is not an expert rank, or before start_serving()");
  const int mbs = checked_micro_batches(micro_batches);
  const int64_t moe_layers = mc_.num_moe_layers();
  for (int64_t m = 0; m < moe_layers; ++m) server_->serve_layer(m, mbs);
}

PhaseSeconds Engine::my_phases() const {
  if (forward_) {
    const DensePhaseTimes& dt = forward_->times();
    const MoePhaseTimes& mt = moe_->times();
    PhaseSeconds p{{"attention", dt.attention}, {"gate", dt.gate},         {"pack", mt.pack},
                   {"exchange", mt.exchange},   {"wait_experts", mt.wait}, {"expert_compute", mt.experts},
                   {"combine", mt.combine},     {"head", dt.head}};
    if (mc_.shared_expert_intermediate_size > 0) p["shared_expert"] = dt.shared_expert;
    if (mc_.num_dense_layers() > 0) p["dense_mlp"] = dt.dense_mlp;
    return p;
  }
  if (server_) {
    const MoePhaseTimes& mt = server_->times();
    return {{"pack", mt.pack}, {"exchange", mt.exchange}, {"expert_compute", mt.experts}, {"idle", idle_s_}};
  }
  return {};
}

EngineReport Engine::report() {
  EngineReport rep;
  rep.ranks = topo_.world_size;
  rep.routers = routers();
  rep.huge_pages = weights_in_huge_pages();
  rep.memory_budget = budget_;
  const PhaseSeconds mine = my_phases();
  if (distributed()) {
    std::vector<double> exchanges{forward_ ? static_cast<double>(moe_->times().exchanges) : 0.0};
    comm::reduce_max_to_root(exchanges, world_);
    rep.moe_exchanges = static_cast<int64_t>(exchanges[0]);
    static const std::vector<std::string> names{"attention",    "gate",           "shared_expert", "pack", "exchange",
                                                "wait_experts", "expert_compute", "combine",       "head", "idle"};
    for (const char* role : {"router", "expert"}) {
      std::vector<double> v(names.size(), 0.0);
      if ((std::string(role) == "router") == is_router())
        for (std::size_t i = 0; i < names.size(); ++i) v[i] = mine.count(names[i]) ? mine.at(names[i]) : 0.0;
      comm::reduce_max_to_root(v, world_);
      if (rank_ == 0)
        for (std::size_t i = 0; i < names.size(); ++i)
          if (v[i] > 0) rep.phases[role][names[i]] = v[i];
    }
  } else {
    rep.phases["router"] = mine;
  }
  if (distributed()) rep.balance = balance_report();
  if (swap_) rep.hot_swap = swap_->counters();
  comm::reduce_counters_to_root(rep.hot_swap, world_);
  // Every rank's cache counters (zeros without a cache) to rank 0: summed and per expert rank.
  const auto* cache = dynamic_cast<const experts::ExpertCache*>(store_.get());
  std::vector<double> mine_c = cache ? cache->counters().to_vector() : experts::CacheCounters{}.to_vector();
  const std::size_t n = mine_c.size();
  mine_c.push_back(cache ? 1.0 : 0.0);
  const std::vector<double> all = distributed() ? comm::gather_to_root(mine_c, world_) : mine_c;
  for (std::size_t r = 0; r * (n + 1) < all.size(); ++r) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(r * (n + 1));
    if (first[static_cast<std::ptrdiff_t>(n)] == 0) continue;
    const auto c = experts::CacheCounters::from_vector(std::vector<double>(first, first + static_cast<std::ptrdiff_t>(n)));
    rep.cache_on = true;
    rep.cache_per_rank[static_cast<int>(r)] = c;
    combine_counters(rep.cache, c);
  }
  if (const io::ObjectStore* store = location_->store()) {
    // Requests this rank sent itself (HEADs, listings, expert GETs, model.h5 pages).
    rep.object_store = store->stats();
    comm::reduce_counters_to_root(rep.object_store, world_);
    rep.remote_model = true;
  }
  return rep;
}

}  // namespace moerun::runtime

// Three-tier expert cache: L1 slots, I/O threads, prefetch and eviction.
#include "experts/expert_cache.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <omp.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "experts/affinity_graph.hpp"
#include "experts/resident_experts.hpp"
#include "io/model_file.hpp"

namespace moerun::experts {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;
}

// Prefetch loads in flight at once while the guesses are often wrong (below kSurePrecision of
// them used, once 64 were judged): a guess read while the layer's own loads wait takes the disk
// from them, and a load in flight is never called back; between two layers' gates the disk has
// time for about one expert (a layer's compute at one sequence), so one guess at a time fills it.
// Bench shape at 2x, uniform routing, ab_offload against all loaders: decode medians +5% at N = 8
// and even at N = 1 (6 runs), +5% at N = 1 and even at N = 8 (4 runs): fewer wasted reads, within
// this disk's noise. Sure guesses (skewed routing: all used) keep every loader.
//
// And an unsure guess reads only while no demand read is queued or running: a guess read next to
// a demand read shares the disk with it (this disk streams at its full rate with one read in
// flight), so it started in the layer's own loads and delayed them. It now starts when the layer's
// last demand read is in, while that load is still being checked and packed and the layer's last
// experts computed. Bench shape at 2x, uniform routing, 256 tokens, ab_offload, two A/Bs: N = 1
// decode medians +9% (5 runs) and +6% (6 runs); N = 8 the same within noise (4 runs).
constexpr int kUnsurePrefetchInFlight = 1;
constexpr double kSurePrecision = 0.8;

// Unsure guesses (below kSurePrecision) are loaded only while the compute between one layer's last
// demand load and the next layer's start (the gap, averaged) is at least a load's disk time: a guess
// read in a shorter gap is still reading when the next layer's own loads arrive and delays them,
// and a wrong one (a third or more) costs a whole read. Bench shape at 2x, uniform routing: one
// sequence has gaps of ~0.3 ms against 0.4-0.5 ms loads, and decoded 0.62 of the bound without
// guesses against 0.54-0.57 with them; eight sequences have ~0.9 ms gaps and 0.79 with them
// against 0.73 without (one A/B; a second had them within noise).
constexpr double kGapWeight = 0.1;  // of each new layer's gap in the running average

// Guesses judged before the precision counts, and the half-life-like span of the running precision:
// recent guesses, not the run's (a prompt's guesses, nearly all used since it routes to most
// experts, kept one-sequence decode "sure" for hundreds of tokens).
constexpr double kRecentGuesses = 64;

}  // namespace

void ExpertCacheConfig::validate() const {
  if (warmup_requests < 0) fail_config("warmup_requests", "must be >= 0");
  if (l1_bytes < 0) fail_config("l1_bytes", "must be >= 0");
  if (l2_bytes < 0) fail_config("l2_bytes", "must be >= 0");
  if (io_threads < 1 || io_threads > 64) fail_config("io_threads", "must be in [1, 64]");
}

double CacheCounters::l1_hit_rate() const {
  return ratio(static_cast<double>(l1_hits), static_cast<double>(l1_hits + l1_misses));
}
double CacheCounters::l2_hit_rate() const {
  return ratio(static_cast<double>(l2_hits), static_cast<double>(l2_hits + l2_misses));
}
double CacheCounters::prefetch_precision() const {
  return ratio(static_cast<double>(prefetch_used), static_cast<double>(prefetch_issued));
}
double CacheCounters::prefetch_recall() const {
  // Of the experts that had to come into L1 for a layer, the share a prefetch brought (the rest
  // were demand loads).
  return ratio(static_cast<double>(prefetch_used), static_cast<double>(prefetch_used + demand_loads));
}

const std::vector<CounterField<CacheCounters>>& CacheCounters::fields() {
  using C = CacheCounters;
  static const std::vector<CounterField<C>> f{counter("l1_hits", &C::l1_hits),
                                              counter("l1_misses", &C::l1_misses),
                                              counter("l2_hits", &C::l2_hits),
                                              counter("l2_misses", &C::l2_misses),
                                              counter("l3_reads", &C::l3_reads),
                                              counter("l2_bytes_read", &C::l2_bytes_read),
                                              counter("l3_bytes_read", &C::l3_bytes_read),
                                              counter("l2_bytes_written", &C::l2_bytes_written),
                                              counter("l2_corrupt", &C::l2_corrupt),
                                              counter("prefetch_issued", &C::prefetch_issued),
                                              counter("prefetch_used", &C::prefetch_used),
                                              counter("prefetch_wasted", &C::prefetch_wasted),
                                              counter("prefetch_held", &C::prefetch_held),
                                              counter("evictions", &C::evictions),
                                              counter("demand_loads", &C::demand_loads),
                                              counter("warmup_loads", &C::warmup_loads),
                                              counter("warmup_used", &C::warmup_used),
                                              counter("stall_s", &C::stall_s),
                                              counter("load_read_s", &C::read_s),
                                              counter("load_verify_s", &C::verify_s),
                                              counter("load_pack_s", &C::pack_s),
                                              counter("loading_s", &C::loading_s),
                                              counter("finished_by_waiter", &C::finished_by_waiter)};
  return f;
}

std::vector<double> CacheCounters::to_vector() const {
  std::vector<double> v;
  for (const auto& f : fields()) v.push_back(f.get(*this));
  return v;
}

CacheCounters CacheCounters::from_vector(const std::vector<double>& v) {
  CacheCounters c;
  for (std::size_t i = 0; i < fields().size() && i < v.size(); ++i) {
    const auto& f = fields()[i];
    if (f.i)
      c.*f.i = std::llround(v[i]);
    else
      c.*f.d = v[i];
  }
  return c;
}

void CacheCounters::add(const CacheCounters& o) {
  combine_counters(*this, o);
}

namespace {
// The affinity graph, checked against the policy that needs it and the model's shape.
const io::AffinityGraph* checked_graph(const ExpertCacheConfig& cfg, const io::AffinityGraph* graph, int64_t layers, int64_t experts) {
  if (cfg.prefetch == PrefetchPolicy::Affinity && !graph)
    fail(ErrorKind::Usage, "--prefetch affinity needs --affinity FILE (from moerun affinity build)");
  if (graph && (graph->num_layers != layers || graph->num_experts != experts))
    fail(ErrorKind::BadInput, graph->source.empty() ? std::string("the affinity graph") : graph->source, ": graph of ", graph->num_layers,
         " layers x ", graph->num_experts, " experts; the model has ", layers, " x ", experts, " (build it from this model's traces)");
  return graph;
}
}  // namespace

ExpertCache::ExpertCache(const ExpertCacheConfig& cfg, ExpertBackend& backend, const io::ExpertSource& source,
                         std::function<bool(int64_t, int64_t)> owns, const io::AffinityGraph* graph)
    : cfg_(cfg),
      backend_(backend),
      source_(source),
      owns_(std::move(owns)),
      num_layers_(source.config().num_moe_layers()),
      num_experts_(source.config().num_experts),
      raw_bytes_(static_cast<int64_t>(io::expert_raw_bytes(source.config()))),
      policy_(cfg.prefetch, cfg.warmup, num_layers_, num_experts_, checked_graph(cfg, graph, num_layers_, num_experts_), owns_) {
  // The budget counts what a slot really takes in the backend's memory, padding included.
  slot_bytes_ = backend_.expert_bytes();
  cfg_.validate();
  int64_t owned = 0;
  for (int64_t l = 0; l < num_layers_; ++l)
    for (int64_t e = 0; e < num_experts_; ++e) owned += owns_(l, e) ? 1 : 0;
  const int64_t n = std::min(cfg_.l1_bytes / slot_bytes_, std::max<int64_t>(owned, 1));
  if (n < 1)
    fail(ErrorKind::Usage, "--l1-bytes ", cfg_.l1_bytes, " holds no expert: one expert is ", slot_bytes_, " bytes in ", backend_.describe(),
         " (moerun inspect prints the CPU figure)");
  if (const int64_t have = backend_.memory_bytes(); have > 0 && n * slot_bytes_ > have)
    fail(ErrorKind::Usage, "--l1-bytes: ", n, " L1 slots of ", slot_bytes_, " bytes need ", (n * slot_bytes_) >> 20, " MiB, more than the ",
         have >> 20, " MiB of ", memory_kind_name(backend_.weight_memory()), " memory in ", backend_.describe());
  slots_.resize(static_cast<std::size_t>(n));
  for (Slot& slot : slots_) slot.w = backend_.allocate_expert();
  warming_ = cfg_.warmup == WarmupPolicy::Hotness && cfg_.warmup_requests > 0;
  if (policy_.seed_hotness_from_graph()) {
    // The graph's routing frequencies (other runs' tokens) are the hotness known before serving:
    // L1 settles on the hottest at once rather than after the first requests.
    warming_ = false;
    queue_settle_locked();  // no loader runs yet: no lock needed
  }
  if (!cfg_.l2_dir.empty())
    l2_ = std::make_unique<io::BlobStore>(cfg_.l2_dir, cfg_.l2_bytes, stored_form_name(backend_, source.config()), cfg_.l2_direct);
  for (int i = 0; i < cfg_.io_threads; ++i) workers_.emplace_back([this] { worker(); });
  log::debug("expert cache: ", n, " L1 slots of ", slot_bytes_, " bytes (", backend_.describe(), "; ", raw_bytes_, " stored) for ", owned,
             " experts, prefetch ", prefetch_name(cfg_.prefetch), ", warm-up ", warmup_name(cfg_.warmup),
             l2_ ? ", L2 " + cfg_.l2_dir : std::string());
}

ExpertCache::~ExpertCache() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    tasks_.clear();
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

bool ExpertCache::owns(int64_t layer, int64_t expert) const {
  std::lock_guard<std::mutex> lock(mu_);
  return layer >= 0 && layer < num_layers_ && expert >= 0 && expert < num_experts_ && owns_(layer, expert);
}

std::vector<std::exception_ptr> ExpertCache::prepare(const std::vector<std::pair<int64_t, int64_t>>& experts) {
  std::vector<std::exception_ptr> errors;
  AlignedBuffer raw;
  std::unique_ptr<ResidentExpert> scratch = backend_.allocate_expert();
  for (const auto& [l, e] : experts) {
    try {
      load_into(key(l, e), raw, *scratch);
      errors.emplace_back();
    } catch (...) {
      errors.push_back(std::current_exception());
    }
  }
  return errors;
}

void ExpertCache::hold(const std::function<bool(int64_t, int64_t)>& holds) {
  std::lock_guard<std::mutex> lock(mu_);
  owns_ = holds;
  policy_.set_owns(holds);
  auto held = [&](int64_t k) { return owns_(k / num_experts_, k % num_experts_); };
  tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(), [&](const Task& t) { return !held(t.key); }), tasks_.end());
  for (Slot& slot : slots_)
    if (slot.key >= 0 && !held(slot.key) && slot.pins == 0 && slot.state != State::Loading) {
      where_.erase(slot.key);
      slot.clear();
    }
}

int ExpertCache::choose_victim_locked(const Task& t) const {
  const int best = choose_victim_locked(t, false);
  // The expert the layer waits for, with every unpinned slot holding another the layer still needs
  // (loaded ahead of it: L1 smaller than the layer's experts here): one of those goes, to be read
  // again, or the layer and the loaders would wait on each other for ever.
  if (best < 0 && t.kind == TaskKind::Demand && t.key == awaited_) return choose_victim_locked(t, true);
  return best;
}

int ExpertCache::choose_victim_locked(const Task& t, bool take_needed) const {
  int best = -1;
  double best_score = 0;
  uint64_t best_use = 0;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const Slot& s = slots_[static_cast<std::size_t>(i)];
    if (s.state == State::Empty) return i;
    if (s.pins > 0 || s.state == State::Loading) continue;
    if (!take_needed && needed_now_.count(s.key) && !done_now_.count(s.key)) continue;  // the current layer still needs it
    if (t.kind == TaskKind::Prefetch && needed_now_.count(s.key)) continue;  // keep this layer's for its other micro-batches
    const double score = policy_.keep_score(s.key, current_layer_);
    if (best < 0 || score < best_score || (score == best_score && s.last_use < best_use)) {
      best = i;
      best_score = score;
      best_use = s.last_use;
    }
  }
  if (best >= 0 && !policy_.may_displace(t.kind, t.score, best_score)) return -1;
  return best;
}

void ExpertCache::queue_prefetch_locked(int64_t layer, const std::vector<int64_t>& rows) {
  // Stale guesses go: a new layer's needs are the better evidence. (The warm-up's fills stay.)
  tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(),
                              [](const Task& t) { return t.kind == TaskKind::Prefetch || t.kind == TaskKind::WarmL2; }),
               tasks_.end());
  ++generation_;
  const PrefetchPlan plan = policy_.plan_prefetch(layer, rows, c_.prefetch_used + c_.prefetch_wasted, c_.prefetch_used);
  if (plan.skip) return;
  const int64_t room = static_cast<int64_t>(slots_.size()) - static_cast<int64_t>(needed_now_.size());
  if (l2_)
    for (const ScoredExpert& s : plan.l2) tasks_.push_back({s.key, TaskKind::WarmL2, generation_, s.score});
  // Held back (prefetch_cap_locked() 0): the predictions still keep hinted experts in L1, and every
  // eighth layer still loads its guesses, so that the precision follows routing that turns
  // predictable.
  probe_layer_ = false;
  if (prefetch_cap_locked() == 0) {
    ++c_.prefetch_held;
    if (c_.prefetch_held % 8 != 0) return;
    probe_layer_ = true;
  }
  int64_t queued = 0;
  for (const ScoredExpert& s : plan.l1) {
    if (queued >= room) break;
    ++queued;
    if (where_.count(s.key)) continue;
    // L1 prefetches go before the warm-up's fills and L2 warming, after demands.
    auto pos =
        std::find_if(tasks_.begin(), tasks_.end(), [](const Task& t) { return t.kind == TaskKind::Fill || t.kind == TaskKind::WarmL2; });
    tasks_.insert(pos, {s.key, TaskKind::Prefetch, generation_, s.score});
  }
}

void ExpertCache::queue_settle_locked() {
  // Hottest first, behind demands and prefetches: the settle uses loaders that would otherwise idle.
  for (const ScoredExpert& s : policy_.hottest(static_cast<int64_t>(slots_.size()))) {
    if (where_.count(s.key)) continue;
    auto pos = std::find_if(tasks_.begin(), tasks_.end(), [](const Task& t) { return t.kind == TaskKind::WarmL2; });
    tasks_.insert(pos, {s.key, TaskKind::Fill, generation_, s.score});
  }
}
void ExpertCache::warm_up() {
  if (cfg_.warmup != WarmupPolicy::IdOrder) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t left = static_cast<int64_t>(slots_.size());
    for (int64_t k = 0; k < num_layers_ * num_experts_ && left > 0; ++k)
      if (owns_(k / num_experts_, k % num_experts_)) {
        tasks_.push_back({k, TaskKind::Fill, generation_, std::numeric_limits<double>::infinity()});
        --left;
      }
  }
  cv_.notify_all();
  drain();
  // A failed load is reported when a layer needs that expert (as for any prefetch).
}

void ExpertCache::requests_finished(int64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!warming_ || n < cfg_.warmup_requests) return;
    warming_ = false;
    queue_settle_locked();
  }
  cv_.notify_all();
}

std::vector<int64_t> ExpertCache::begin_layer(int64_t layer, const std::vector<int64_t>& rows) {
  std::vector<int64_t> ready, waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (layer != current_layer_) done_now_.clear();
    note_layer_gap_locked(layer == current_layer_ + 1);
    current_layer_ = layer;
    policy_.layer_begins(layer, rows);
    needed_now_.clear();
    for (int64_t e = 0; e < static_cast<int64_t>(rows.size()); ++e) {
      if (rows[static_cast<std::size_t>(e)] <= 0) continue;
      const int64_t k = key(layer, e);
      needed_now_.insert(k);
      done_now_.erase(k);  // needed again (another micro-batch of the layer)
      auto it = where_.find(k);
      const bool in_l1 = it != where_.end() && slots_[static_cast<std::size_t>(it->second)].state == State::Ready;
      if (in_l1) {
        ++c_.l1_hits;
        ready.push_back(e);
      } else {
        ++c_.l1_misses;
        waiting.push_back(e);
        if (it == where_.end()) {
          // Demand loads go first, in the order the layer will run them.
          auto pos = std::find_if(tasks_.begin(), tasks_.end(), [](const Task& t) { return t.kind != TaskKind::Demand; });
          tasks_.insert(pos, {k, TaskKind::Demand, generation_, 0.0});
        }
      }
    }
    queue_prefetch_locked(layer, rows);
    policy_.layer_routed(layer, rows);
  }
  cv_.notify_all();
  ready.insert(ready.end(), waiting.begin(), waiting.end());
  return ready;
}

void ExpertCache::hint(int64_t layer, const std::vector<int64_t>& rows) {
  if (layer < 0 || layer >= num_layers_) return;
  std::lock_guard<std::mutex> lock(mu_);
  policy_.hint(layer, rows);
}

const ResidentExpert& ExpertCache::acquire(int64_t layer, int64_t expert) {
  const int64_t k = key(layer, expert);
  std::unique_lock<std::mutex> lock(mu_);
  const double t0 = now();
  bool waited = false;
  while (true) {
    auto it = where_.find(k);
    if (it == where_.end()) {
      // Not announced (or its load failed earlier): load on demand now.
      if (std::none_of(tasks_.begin(), tasks_.end(), [&](const Task& t) { return t.key == k && t.kind == TaskKind::Demand; }))
        tasks_.push_front({k, TaskKind::Demand, generation_, 0.0});
      needed_now_.insert(k);
      cv_.notify_all();
    } else {
      Slot& s = slots_[static_cast<std::size_t>(it->second)];
      if (s.state == State::Failed) {
        std::exception_ptr e = s.error;
        awaited_ = -1;
        where_.erase(it);
        s.clear();
        cv_.notify_all();
        std::rethrow_exception(e);
      }
      if (s.state == State::Ready) {
        awaited_ = -1;
        if (waited) c_.stall_s += now() - t0;
        ++s.pins;
        if (s.prefetched && !s.used) {
          ++c_.prefetch_used;
          judge_guess_locked(true);
        }
        if (s.warmed && !s.used) ++c_.warmup_used;
        s.used = true;
        return *s.w;
      }
    }
    waited = true;
    if (handoff_ && handoff_->key == k) {
      finish_handoff(lock);
      continue;
    }
    if (awaited_ != k) {  // a loader that found no slot for k looks again (choose_victim_locked)
      awaited_ = k;
      cv_.notify_all();
    }
    cv_.wait(lock);
  }
}

void ExpertCache::release(int64_t layer, int64_t expert) {
  const int64_t k = key(layer, expert);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = where_.find(k);
    if (it == where_.end()) return;
    Slot& s = slots_[static_cast<std::size_t>(it->second)];
    if (s.pins > 0) --s.pins;
    s.last_use = ++clock_;
    done_now_.insert(k);
  }
  cv_.notify_all();
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Parts the L2 tier reads or writes: the backend's packed host form where it has one, else the raw form.
std::vector<io::ConstBlobPart> const_parts(const std::vector<io::BlobPart>& parts) {
  std::vector<io::ConstBlobPart> c;
  for (const io::BlobPart& p : parts) c.push_back({p.data, p.size});
  return c;
}

}  // namespace

ExpertCache::DemandRead::DemandRead(ExpertCache& c, bool demand) : c_(c), active_(demand) {
  c_.demand_reads_ += demand;
}

void ExpertCache::DemandRead::done() {
  if (!active_) return;
  active_ = false;
  bool guess_waits;  // only a guess at the queue's front waits for the demand reads to end
  {
    std::lock_guard<std::mutex> lock(c_.mu_);
    guess_waits = --c_.demand_reads_ == 0 && !c_.tasks_.empty() && c_.tasks_.front().kind == TaskKind::Prefetch;
  }
  if (guess_waits) c_.cv_.notify_all();
}

ExpertCache::L3Read ExpertCache::read_from_l3(int64_t k, AlignedBuffer& raw) {
  const int64_t l = k / num_experts_, e = k % num_experts_;
  std::shared_ptr<const Swapped> swapped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = swapped_.find(k);
    if (it != swapped_.end()) swapped = it->second;
  }
  L3Read r;
  r.want = swapped ? swapped->xxh64 : source_.checksum(l, e);
  r.where = swapped ? swapped->where : source_.where(l, e);
  const auto t0 = Clock::now();
  if (swapped) {
    raw.resize(swapped->raw.size());
    std::memcpy(raw.data(), swapped->raw.data(), raw.size());
  } else {
    source_.read_raw_into(l, e, raw);
  }
  r.read_s = since(t0);
  return r;
}

void ExpertCache::finish_from_l3(int64_t k, const AlignedBuffer& raw, ResidentExpert* into, const L3Read& r) {
  const int64_t l = k / num_experts_, e = k % num_experts_;
  auto t0 = Clock::now();
  io::verify_expert(raw.data(), source_.config(), r.want, r.where, l, e);
  const double verify = since(t0);
  t0 = Clock::now();
  if (into) backend_.load_expert(raw.data(), *into);
  const double pack = since(t0);
  // L2 keeps a CPU backend's packed form (a later hit reads it straight into a slot, with no pack),
  // and for other backends the raw form.
  const std::vector<io::ConstBlobPart> stored_form = into && backend_.stored_form()
                                                         ? const_parts(backend_.stored_form()->parts(*into))
                                                         : std::vector<io::ConstBlobPart>{{raw.data(), raw.size()}};
  const bool stored = l2_ && l2_->put(l, e, stored_form, r.want);
  std::lock_guard<std::mutex> lock(mu_);
  ++c_.l3_reads;
  c_.l3_bytes_read += raw_bytes_;
  c_.read_s += r.read_s;
  c_.verify_s += verify;
  c_.pack_s += pack;
  if (stored) c_.l2_bytes_written += stored_bytes();
  if (l2_) c_.l2_corrupt = l2_->corrupt_dropped();
}

void ExpertCache::fetch_from_l3(int64_t k, AlignedBuffer& raw, ResidentExpert* into, DemandRead* demand_read) {
  const L3Read r = read_from_l3(k, raw);
  if (demand_read) demand_read->done();
  finish_from_l3(k, raw, into, r);
}

bool ExpertCache::load_from_l2(int64_t k, AlignedBuffer& raw, ResidentExpert& slot, DemandRead* demand_read) {
  const int64_t l = k / num_experts_, e = k % num_experts_;
  {
    const auto t0 = Clock::now();
    uint64_t want;
    {
      std::lock_guard<std::mutex> lock(mu_);
      want = source_checksum_locked(k);
    }
    const StoredForm* form = backend_.stored_form();
    const bool packed = form != nullptr;
    std::vector<io::BlobPart> parts = packed ? form->parts(slot) : std::vector<io::BlobPart>{};
    if (!packed) {
      raw.resize(static_cast<std::size_t>(raw_bytes_));
      parts.push_back({raw.data(), raw.size(), raw.capacity()});
    }
    if (l2_->read(l, e, want, parts)) {  // checksummed by the blob store
      const double read = since(t0);
      if (demand_read) demand_read->done();
      auto t1 = Clock::now();
      if (packed) {
        form->check_finite(slot, l2_->dir(), io::expert_group_path(l, e));
      } else {
        io::verify_expert(raw.data(), source_.config(), want, l2_->dir() + " (L2)", l, e);
      }
      const double verify = since(t1);
      double pack = 0;  // a packed form is ready as read
      if (!packed) {
        t1 = Clock::now();
        backend_.load_expert(raw.data(), slot);
        pack = since(t1);
      }
      std::lock_guard<std::mutex> lock(mu_);
      ++c_.l2_hits;
      c_.l2_bytes_read += stored_bytes();
      c_.pack_s += pack;
      c_.read_s += read;
      c_.verify_s += verify;
      return true;
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++c_.l2_misses;
  }
  return false;
}

void ExpertCache::load_into(int64_t k, AlignedBuffer& raw, ResidentExpert& slot, DemandRead* demand_read) {
  if (!(l2_ && load_from_l2(k, raw, slot, demand_read))) fetch_from_l3(k, raw, &slot, demand_read);
}

int ExpertCache::prefetch_cap_locked() const {
  const int64_t judged = c_.prefetch_used + c_.prefetch_wasted;
  if (judged < kRecentGuesses || recent_used_ >= kSurePrecision * recent_judged_) return std::numeric_limits<int>::max();
  const double load_s = loads_timed_ > 0 ? c_.loading_s / static_cast<double>(loads_timed_) : 0.0;
  return gap_s_ < 0 || gap_s_ >= load_s || probe_layer_ ? kUnsurePrefetchInFlight : 0;
}

bool ExpertCache::prefetch_may_start_locked() const {
  const int cap = prefetch_cap_locked();
  if (prefetching_ >= cap) return false;
  return cap == std::numeric_limits<int>::max() || demand_reads_ == 0;
}

void ExpertCache::judge_guess_locked(bool used) {
  constexpr double keep = 1.0 - 1.0 / kRecentGuesses;
  recent_used_ = recent_used_ * keep + (used ? 1.0 : 0.0);
  recent_judged_ = recent_judged_ * keep + 1.0;
}

void ExpertCache::note_load_start_locked() {
  if (loading_++ == 0) loading_since_ = now();
}

void ExpertCache::note_load_end_locked(bool demand) {
  const double t = now();
  if (--loading_ == 0) c_.loading_s += t - loading_since_;
  ++loads_timed_;
  if (demand) last_demand_done_ = t;
}

void ExpertCache::note_layer_gap_locked(bool follows) {
  // Only a gap inside a step (the head and the next token's first layer come between steps, where
  // no guess for the next layer is known) that follows demand loads of the layer before (after a
  // layer of hits there was none).
  const double t = now();
  const bool demands_pending = std::any_of(tasks_.begin(), tasks_.end(), [](const Task& x) { return x.kind == TaskKind::Demand; });
  if (follows && last_demand_done_ > last_begin_ && !demands_pending) {
    const double gap = t - last_demand_done_;
    gap_s_ = gap_s_ < 0 ? gap : (1 - kGapWeight) * gap_s_ + kGapWeight * gap;
  }
  last_begin_ = t;
}

void ExpertCache::worker() {
  // oneDNN's reorders run on OpenMP: an I/O thread's own team would fight the compute threads
  // (measured: 11 ms instead of 0.5 ms to pack a 0.75 MiB expert). Loads stay single-threaded.
  omp_set_num_threads(1);
  AlignedBuffer raw;  // this thread's read buffer, reused by every load
  std::unique_ptr<ResidentExpert> warm;  // where L2 warm-ups are packed for a CPU backend (they fill no slot)
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock,
             [&] { return stop_ || (!tasks_.empty() && (tasks_.front().kind != TaskKind::Prefetch || prefetch_may_start_locked())); });
    if (stop_) return;
    Task t = tasks_.front();
    tasks_.pop_front();
    if (t.kind == TaskKind::WarmL2) {
      if (!l2_ || l2_->has(t.key / num_experts_, t.key % num_experts_) || where_.count(t.key)) continue;
      ++running_;
      lock.unlock();
      try {
        if (backend_.stored_form() && !warm) warm = backend_.allocate_expert();
        fetch_from_l3(t.key, raw, warm.get());
      } catch (...) {
        // a failed warm-up is retried on demand, where the error is reported
      }
      lock.lock();
      --running_;
      cv_.notify_all();
      continue;
    }
    if (where_.count(t.key)) continue;
    if (t.kind == TaskKind::Prefetch && t.generation != generation_) continue;
    const int victim = choose_victim_locked(t);
    if (victim < 0) {
      if (t.kind == TaskKind::Prefetch || t.kind == TaskKind::Fill) continue;
      // A demand load waits for a slot to come free (a release), ahead of everything else.
      tasks_.push_front(t);
      cv_.wait(lock);
      continue;
    }
    start_load_locked(t, victim);
    DemandRead demand_read(*this, t.kind == TaskKind::Demand);
    lock.unlock();
    run_load(t, victim, raw, demand_read);
    lock.lock();
  }
}

void ExpertCache::start_load_locked(const Task& t, int victim) {
  Slot& s = slots_[static_cast<std::size_t>(victim)];
  if (s.key >= 0) {
    where_.erase(s.key);
    if (s.prefetched && !s.used) {
      ++c_.prefetch_wasted;
      judge_guess_locked(false);
    }
    ++c_.evictions;
  }
  // Reset everything but the preallocated weights, which the load overwrites.
  s.pins = 0;
  s.last_use = 0;
  s.used = false;
  s.warmed = t.kind == TaskKind::Fill;
  s.error = nullptr;
  s.key = t.key;
  s.state = State::Loading;
  s.prefetched = t.kind == TaskKind::Prefetch;
  if (s.prefetched)
    ++c_.prefetch_issued;
  else if (s.warmed)
    ++c_.warmup_loads;
  else
    ++c_.demand_loads;
  where_[t.key] = victim;
  ++running_;
  prefetching_ += s.prefetched;
  note_load_start_locked();
}

void ExpertCache::run_load(const Task& t, int victim, AlignedBuffer& raw, DemandRead& demand_read) {
  // The slot is Loading: no reader touches its weights and no other load can pick it, so they
  // are written without the lock.
  ResidentExpert& slot = *slots_[static_cast<std::size_t>(victim)].w;
  std::exception_ptr err;
  try {
    if (!(l2_ && load_from_l2(t.key, raw, slot, &demand_read))) {
      const L3Read r = read_from_l3(t.key, raw);
      demand_read.done();
      // The expert the compute waits for is checked and packed by the waiting thread itself, on
      // the core it leaves idle, and this loader reads the next expert at once.
      std::unique_lock<std::mutex> lock(mu_);
      if (awaited_ == t.key && !handoff_ && !waiter_finishing_) {
        handoff_ = std::make_unique<Handoff>(Handoff{t.key, victim, t.kind, r, {}});
        std::swap(handoff_->raw, raw);
        if (!spare_raw_.empty()) {
          raw = std::move(spare_raw_.back());
          spare_raw_.pop_back();
        }
        cv_.notify_all();
        return;
      }
      lock.unlock();
      finish_from_l3(t.key, raw, &slot, r);
    }
  } catch (...) {
    err = std::current_exception();
  }
  demand_read.done();
  std::lock_guard<std::mutex> lock(mu_);
  complete_load_locked(victim, t.kind, err);
}

void ExpertCache::finish_handoff(std::unique_lock<std::mutex>& lock) {
  std::unique_ptr<Handoff> h = std::move(handoff_);
  waiter_finishing_ = true;
  lock.unlock();
  std::exception_ptr err;
  try {
    finish_from_l3(h->key, h->raw, slots_[static_cast<std::size_t>(h->victim)].w.get(), h->read);
  } catch (...) {
    err = std::current_exception();
  }
  lock.lock();
  waiter_finishing_ = false;
  spare_raw_.push_back(std::move(h->raw));
  ++c_.finished_by_waiter;
  complete_load_locked(h->victim, h->kind, err);
}

void ExpertCache::complete_load_locked(int victim, TaskKind kind, std::exception_ptr err) {
  --running_;
  note_load_end_locked(kind == TaskKind::Demand);
  Slot& done = slots_[static_cast<std::size_t>(victim)];
  prefetching_ -= done.prefetched;
  done.error = err;
  done.state = err ? State::Failed : State::Ready;
  cv_.notify_all();
}

uint64_t ExpertCache::source_checksum_locked(int64_t k) const {
  auto it = swapped_.find(k);
  return it != swapped_.end() ? it->second->xxh64 : source_.checksum(k / num_experts_, k % num_experts_);
}

void ExpertCache::replace(int64_t layer, int64_t expert, const void* raw, uint64_t xxh64, const std::string& where) {
  const int64_t k = key(layer, expert);
  auto sw = std::make_shared<Swapped>();
  sw->raw = AlignedBuffer(io::expert_raw_bytes(source_.config()));
  std::memcpy(sw->raw.data(), raw, sw->raw.size());
  sw->xxh64 = xxh64;
  sw->where = where;
  std::unique_lock<std::mutex> lock(mu_);
  // A load of the old weights in flight finishes first; then its slot is rewritten.
  cv_.wait(lock, [&] {
    auto it = where_.find(k);
    return it == where_.end() || slots_[static_cast<std::size_t>(it->second)].state != State::Loading;
  });
  swapped_[k] = sw;
  if (l2_) l2_->forget(layer, expert);
  auto it = where_.find(k);
  if (it == where_.end()) return;
  Slot& s = slots_[static_cast<std::size_t>(it->second)];
  if (s.pins > 0) fail(ErrorKind::Internal, "hot swap of expert (", layer, ", ", expert, ") while it is in use");
  if (s.state == State::Ready) {
    backend_.load_expert(sw->raw.data(), *s.w);
  } else {  // Failed: forget it, the next need loads the new weights
    where_.erase(it);
    s.clear();
  }
}

void ExpertCache::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return running_ == 0 && tasks_.empty(); });
}

CacheCounters ExpertCache::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  CacheCounters c = c_;
  for (const Slot& s : slots_)
    if (s.key >= 0 && s.prefetched && !s.used) ++c.prefetch_wasted;  // never used before the end
  if (l2_) c.l2_corrupt = l2_->corrupt_dropped();
  return c;
}

int64_t ExpertCache::resident_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const Slot& s : slots_)
    if (s.key >= 0) n += slot_bytes_;
  return n;
}

}  // namespace moerun::experts

namespace moerun::experts {

bool ExpertCache::in_l1(int64_t layer, int64_t expert) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = where_.find(key(layer, expert));
  return it != where_.end() && slots_[static_cast<std::size_t>(it->second)].state == State::Ready;
}

}  // namespace moerun::experts

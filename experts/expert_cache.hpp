// ExpertCache: the three-tier expert weight cache of an expert rank (DESIGN §5). L1 is a budget of
// --l1-bytes of expert slots in the ExpertBackend's memory (host for cpu, device for cuda); L2 an
// on-disk blob store (io::BlobStore); L3 the model's shards or object store (io::ExpertSource). I/O
// threads load experts L3 -> L2 -> L1: an expert from L3 is verified against its xxh64 and loaded
// into the backend; L2 keeps the CPU backend's packed form, so an L2 hit is one read per matrix
// into the slot (for other backends the raw form, verified again on the way back). Prefetch:
// when a layer's needs are known, the experts the next layer will likely need are loaded into L1
// (lru: those the next layer used last time; affinity: predicted from the affinity graph), and for
// affinity their likeliest successors into L2; gate: those the router predicts by applying the next
// layer's gate to this layer's expert input, hint()ed before this layer's experts run). Eviction
// never touches an expert in use or still needed by the current layer; otherwise it takes the lowest predicted use (affinity) or the least
// recently used (lru, off). The policies (what to guess, what to keep, hotness) are
// experts/cache_policy's; this file is the machinery: slots, loaders and tiers.
#pragma once
#include "base/counter_fields.hpp"
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "experts/cache_policy.hpp"
#include "experts/expert_store.hpp"
#include "io/affinity_file.hpp"
#include "io/blob_store.hpp"
#include "io/expert_shards.hpp"

namespace moerun::experts {

struct ExpertCacheConfig {
  int64_t l1_bytes = 0;  // 0: no cache, every owned expert resident
  std::string l2_dir;  // empty: no L2
  int64_t l2_bytes = int64_t{16} << 30;
  bool l2_direct = true;  // O_DIRECT reads from L2 (false: through the page cache)
  bool l3_direct = true;  // O_DIRECT reads from a local model's shards (false: through the page cache)
  PrefetchPolicy prefetch = PrefetchPolicy::Gate;
  WarmupPolicy warmup = WarmupPolicy::Hotness;
  int64_t warmup_requests = 16;  // Hotness: the requests counted before L1 settles on the hottest experts
  // Loader threads: each reads, verifies and packs one expert at a time, so this is also the reads
  // in flight. 4: on the bench shape under a 2x budget, N = 8 decoded 91-95 tokens/s against 63-80
  // with 2 (N = 1 the same), for 7 MiB less L1.
  int io_threads = 4;
  void validate() const;
};

struct CacheCounters {
  int64_t l1_hits = 0, l1_misses = 0;  // per expert needed by a layer: in L1 when the need was known, or not
  int64_t l2_hits = 0, l2_misses = 0;  // per load into L1 (when there is an L2)
  int64_t l3_reads = 0;
  int64_t l2_bytes_read = 0, l3_bytes_read = 0, l2_bytes_written = 0;
  int64_t l2_corrupt = 0;  // L2 entries that failed their checksum (dropped, refetched)
  int64_t prefetch_issued = 0, prefetch_used = 0, prefetch_wasted = 0;
  int64_t prefetch_held = 0;  // layers whose unsure guesses were not loaded: gaps shorter than a load
  int64_t evictions = 0;
  int64_t demand_loads = 0;  // loads into L1 because a layer needed the expert now
  int64_t warmup_loads = 0;  // loads by the warm-up (id order, or the hotness settle)
  int64_t warmup_used = 0;  // of those, experts a layer then used
  int64_t finished_by_waiter = 0;  // L3 loads checked and packed by the thread waiting for them
  double stall_s = 0;  // compute waiting for weights
  // Where load time goes, summed over I/O threads: reading (L2 or L3), checksums, packing.
  double read_s = 0, verify_s = 0, pack_s = 0;
  // Wall time with at least one load running: the disk's busy time, as the cache sees it.
  double loading_s = 0;

  double l1_hit_rate() const;
  double l2_hit_rate() const;
  double prefetch_precision() const;  // used / issued
  double prefetch_recall() const;  // needed experts that a prefetch brought / all that L1 did not already hold
  // The field table (base/counter_fields.hpp): every field summed across ranks.
  static const std::vector<CounterField<CacheCounters>>& fields();
  std::vector<double> to_vector() const;  // in fields() order
  static CacheCounters from_vector(const std::vector<double>& v);
  void add(const CacheCounters& o);
};

class ExpertCache : public ExpertStore {
 public:
  // `owns(l, e)`: the experts of this rank. `graph` is required for PrefetchPolicy::Affinity.
  // Slots are allocated and loaded by `backend` (which must outlive the cache).
  ExpertCache(const ExpertCacheConfig& cfg, ExpertBackend& backend, const io::ExpertSource& source,
              std::function<bool(int64_t, int64_t)> owns, const io::AffinityGraph* graph);
  ~ExpertCache() override;

  bool owns(int64_t layer, int64_t expert) const override;
  std::vector<int64_t> begin_layer(int64_t layer, const std::vector<int64_t>& rows) override;
  bool wants_hints() const override { return policy_.prefetch() == PrefetchPolicy::Gate; }
  // Gate prefetch: rows predicted for `layer` (summed over micro-batches), prefetched when the layer
  // before it begins and kept from eviction until `layer` itself begins.
  void hint(int64_t layer, const std::vector<int64_t>& rows) override;
  const ResidentExpert& acquire(int64_t layer, int64_t expert) override;
  void release(int64_t layer, int64_t expert) override;
  // The new weights become this expert's L3 (kept in memory); an L1 copy is reloaded in place and
  // an L2 copy forgotten.
  void replace(int64_t layer, int64_t expert, const void* raw, uint64_t xxh64, const std::string& where) override;
  // Rebalancing: prepare() loads each expert once through L2/L3 into a scratch expert (verified,
  // and left in L2); hold() changes what this rank owns, forgetting L1 copies and queued loads of
  // experts it no longer holds.
  std::vector<std::exception_ptr> prepare(const std::vector<std::pair<int64_t, int64_t>>& experts) override;
  void hold(const std::function<bool(int64_t, int64_t)>& holds) override;

  CacheCounters counters() const;
  int64_t slots() const { return static_cast<int64_t>(slots_.size()); }
  int64_t slot_bytes() const { return slot_bytes_; }  // a slot's real size: one expert in the backend's memory
  int64_t resident_bytes() const;  // experts now held in L1 (loaded or loading)
  bool in_l1(int64_t layer, int64_t expert) const;  // loaded and ready
  // Blocks until no load is queued or running (tests, and clean counters at the end).
  void drain();
  // Start of serving: WarmupPolicy::IdOrder loads every slot here and returns when they are loaded.
  void warm_up();
  // Requests finished so far in the whole job: at warmup_requests the hotness warm-up settles.
  void requests_finished(int64_t n);

 private:
  enum class State { Empty, Loading, Ready, Failed };
  struct Slot {
    int64_t key = -1;
    State state = State::Empty;
    int pins = 0;
    uint64_t last_use = 0;
    bool prefetched = false, used = false, warmed = false;
    std::unique_ptr<ResidentExpert> w;  // allocated once; every load goes into it
    std::exception_ptr error;
    // Empty again, keeping the allocated weights.
    void clear() {
      std::unique_ptr<ResidentExpert> keep = std::move(w);
      *this = Slot{};
      w = std::move(keep);
    }
  };
  using TaskKind = LoadKind;
  struct Task {
    int64_t key;
    TaskKind kind;
    uint64_t generation;
    double score;
  };

  int64_t key(int64_t l, int64_t e) const { return l * num_experts_ + e; }
  void worker();
  int choose_victim_locked(const Task& t) const;
  int choose_victim_locked(const Task& t, bool take_needed) const;
  // Prefetch loads that may run at once: by how many guesses were used and, for unsure ones, whether
  // the compute between layers leaves the disk time for one (0: none).
  int prefetch_cap_locked() const;
  void judge_guess_locked(bool used);  // a prefetched expert used, or evicted unused
  void note_load_start_locked();
  void note_load_end_locked(bool demand);
  // At a layer's start: the gap since the last demand load finished, if `follows` the layer before.
  void note_layer_gap_locked(bool follows);
  void queue_prefetch_locked(int64_t layer, const std::vector<int64_t>& rows);
  void queue_settle_locked();  // hotness warm-up: the hottest experts not in L1, hottest first
  // A demand load's read: counted from when a loader takes it until its bytes are in (done(), or
  // the end of the load however it ends), so unsure guesses read only while the disk has no demand.
  class DemandRead {
   public:
    DemandRead(ExpertCache& c, bool demand);  // under mu_
    DemandRead(const DemandRead&) = delete;
    DemandRead& operator=(const DemandRead&) = delete;
    ~DemandRead() { done(); }
    void done();  // takes mu_

   private:
    ExpertCache& c_;
    bool active_;
  };
  // Loads an expert into a slot's weights: from L2 (a CPU backend's packed form read straight into
  // them, or the raw form through `raw`) or else from L3 (fetch_from_l3).
  void load_into(int64_t key, AlignedBuffer& raw, ResidentExpert& slot, DemandRead* read = nullptr);
  bool load_from_l2(int64_t key, AlignedBuffer& raw, ResidentExpert& slot, DemandRead* read);  // false: not in L2
  // An L3 load in two parts: the read, then the checksum, the pack into `into` and the L2 copy.
  struct L3Read {
    uint64_t want = 0;
    std::string where;
    double read_s = 0;
  };
  L3Read read_from_l3(int64_t key, AlignedBuffer& raw);
  void finish_from_l3(int64_t key, const AlignedBuffer& raw, ResidentExpert* into, const L3Read& r);
  // A loader's turn: the slot taken for t (under mu_), then the load run without the lock (the
  // second part of an L3 load handed to acquire() when it waits for this very expert), and the
  // slot marked ready (or failed).
  void start_load_locked(const Task& t, int victim);
  void run_load(const Task& t, int victim, AlignedBuffer& raw, DemandRead& demand_read);
  void complete_load_locked(int victim, TaskKind kind, std::exception_ptr err);
  void finish_handoff(std::unique_lock<std::mutex>& lock);  // acquire(): the handed-off load, finished here
  // From L3 into `into` (none: only into L2): read into `raw`, verify, load into the backend, and
  // store the backend's stored form in L2.
  void fetch_from_l3(int64_t key, AlignedBuffer& raw, ResidentExpert* into, DemandRead* read = nullptr);
  // Whether the guess at the queue's front may start now.
  bool prefetch_may_start_locked() const;
  // Bytes of an expert's form in L2 as the counters count it (a slot for packed forms, else raw).
  int64_t stored_bytes() const { return backend_.stored_form() ? slot_bytes_ : raw_bytes_; }

  ExpertCacheConfig cfg_;
  ExpertBackend& backend_;
  const io::ExpertSource& source_;
  std::function<bool(int64_t, int64_t)> owns_;
  int64_t num_layers_, num_experts_;
  int64_t raw_bytes_;  // an expert as stored (L3 reads)
  int64_t slot_bytes_;  // an expert in the backend's memory, as an L1 slot holds it
  std::unique_ptr<io::BlobStore> l2_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::unordered_map<int64_t, int> where_;  // key -> slot
  std::deque<Task> tasks_;
  int running_ = 0;
  int prefetching_ = 0;  // of running_, prefetch loads (at most prefetch_cap_locked())
  int demand_reads_ = 0;  // demand loads taken by a loader whose bytes are not in yet
  // An L3 load read for the expert acquire() waits for, handed to it to check and pack (with the
  // loader's read buffer; the loader took a spare in its place).
  struct Handoff {
    int64_t key;
    int victim;
    TaskKind kind;
    L3Read read;
    AlignedBuffer raw;
  };
  std::unique_ptr<Handoff> handoff_;
  bool waiter_finishing_ = false;  // one handed-off load at a time: one read buffer more than loaders
  std::vector<AlignedBuffer> spare_raw_;
  // A load's disk time: time with some load running over the loads (pipelined loads overlap), and
  // the running average of the gaps between a layer's last demand load and the next layer's start.
  int loading_ = 0;
  double loading_since_ = 0;  // busy time: CacheCounters::loading_s
  int64_t loads_timed_ = 0;
  double last_demand_done_ = 0, last_begin_ = 0, gap_s_ = -1;
  double recent_used_ = 0, recent_judged_ = 0;  // prefetch guesses, older ones decayed (judge_guess_locked)
  bool probe_layer_ = false;  // this layer's guesses load although held back (one layer in eight)
  int64_t awaited_ = -1;  // the key acquire() waits for, if any
  bool stop_ = false;
  uint64_t clock_ = 0, generation_ = 0;
  int64_t current_layer_ = -1;
  std::unordered_set<int64_t> needed_now_, done_now_;
  CachePolicy policy_;  // what to guess, what to keep, hotness (under mu_)
  bool warming_ = false;
  CacheCounters c_;
  // Hot-swapped experts: their raw weights and checksum replace the source's.
  struct Swapped {
    AlignedBuffer raw;
    uint64_t xxh64 = 0;
    std::string where;
  };
  std::unordered_map<int64_t, std::shared_ptr<const Swapped>> swapped_;
  uint64_t source_checksum_locked(int64_t key) const;
  std::vector<std::thread> workers_;
};

}  // namespace moerun::experts

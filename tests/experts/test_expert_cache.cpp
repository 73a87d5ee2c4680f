// ExpertCache on a real synthetic model (HDF5 shards as L3, a real L2 directory): the L1 budget is
// never exceeded, pinned experts stay, LRU and affinity evict in the order they promise on
// hand-made sequences, the L2 index survives a restart, a flipped byte in L2 is detected and
// healed from L3, and a flipped byte in L3 fails naming the expert and the file.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "base/error.hpp"
#include "tests/test_support.hpp"
#include "experts/expert_cache.hpp"
#include "experts/cpu/cpu_backend.hpp"
#include "experts/cpu/expert_packing.hpp"
#include "experts/resident_experts.hpp"
#include "io/hdf5.hpp"
#include "convert/synthetic_model.hpp"

namespace moerun::experts {
namespace {

namespace fs = std::filesystem;

class ExpertCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = moerun::testing::scratch_dir("cache-test");
    convert::SynthConfig s = moerun::testing::tiny_synth_config(2);
    convert::write_synthetic_model((dir_ / "model").string(), s, true);
    config_ = s.model;
    index_ = std::make_unique<io::ExpertShardIndex>(io::ExpertShardIndex::build((dir_ / "model").string(), config_));
    backend_ = std::make_unique<CpuBackend>(config_, mm_);
    slot_ = packed_expert_bytes(mm_, config_);  // what a slot really takes
  }
  void TearDown() override { fs::remove_all(dir_); }

  ExpertCacheConfig cfg(int slots, PrefetchPolicy p = PrefetchPolicy::Off, bool l2 = false) const {
    ExpertCacheConfig c;
    c.l1_bytes = slots * slot_;
    c.prefetch = p;
    c.warmup = WarmupPolicy::None;  // least recently used first, unless a test says otherwise
    c.io_threads = 1;
    if (l2) c.l2_dir = (dir_ / "l2").string();
    return c;
  }
  std::unique_ptr<ExpertCache> make(const ExpertCacheConfig& c, const io::AffinityGraph* g = nullptr) {
    return std::make_unique<ExpertCache>(
        c, *backend_, *index_, [](int64_t, int64_t) { return true; }, g);
  }
  // An expert as the CPU backend holds it.
  static const FfnWeights& weights(const ResidentExpert& e) { return static_cast<const CpuExpert&>(e).w; }
  // The expert straight from its shard, packed independently of the cache.
  FfnWeights reference(int64_t layer, int64_t expert) {
    const AlignedBuffer raw = index_->load_raw(layer, expert);
    const auto* b = raw.as<const char>();
    const std::size_t each = raw.size() / 3;
    FfnWeights w;
    const int64_t d = config_.hidden_size, ff = config_.intermediate_size;
    for (auto [m, rows, cols, off] : {std::tuple{&w.w1, ff, d, 0ul}, std::tuple{&w.w3, ff, d, each}, std::tuple{&w.w2, d, ff, 2 * each}}) {
      m->allocate(config_.dtype, rows, cols);
      std::memcpy(m->data.data(), b + off, m->bytes());
    }
    pack_ffn(mm_, w);
    return w;
  }
  // A graph over this model's 2 layers x 4 experts with no edges; tests set what they need.
  static io::AffinityGraph empty_graph(int64_t top_k) {
    io::AffinityGraph g;
    g.num_layers = 2;
    g.num_experts = 4;
    g.top_k = top_k;
    g.tokens = 100;
    g.next.assign(4 * 4, 0.0);
    g.next_counts.assign(4 * 4, 0);
    g.coactivation.assign(2 * 4 * 4, 0.0);
    g.coactivation_counts.assign(2 * 4 * 4, 0);
    return g;
  }
  // One layer's work for `experts`: announce, then acquire and release each in the cache's order.
  static void run_layer(ExpertCache& c, int64_t layer, const std::vector<int64_t>& experts) {
    std::vector<int64_t> rows(4, 0);
    for (auto e : experts) rows[static_cast<std::size_t>(e)] = 1;
    for (auto e : c.begin_layer(layer, rows)) {
      c.acquire(layer, e);
      c.release(layer, e);
    }
  }
  fs::path dir_;
  model::ModelConfig config_;
  std::unique_ptr<io::ExpertShardIndex> index_;
  int64_t slot_ = 0;
  Matmul mm_;
  std::unique_ptr<CpuBackend> backend_;
};

TEST_F(ExpertCacheTest, NeverHoldsMoreThanItsBudget) {
  for (auto policy : {PrefetchPolicy::Off, PrefetchPolicy::Lru}) {
    auto c = make(cfg(3, policy));
    EXPECT_EQ(c->slots(), 3);
    std::mt19937 rng(7);
    for (int step = 0; step < 60; ++step) {
      const int64_t layer = step % 2;
      std::vector<int64_t> experts;
      for (int64_t e = 0; e < 4; ++e)
        if (rng() % 2) experts.push_back(e);
      run_layer(*c, layer, experts);
      EXPECT_LE(c->resident_bytes(), 3 * slot_);
    }
    c->drain();
    EXPECT_LE(c->resident_bytes(), 3 * slot_);
    const CacheCounters k = c->counters();
    EXPECT_GT(k.l1_hits + k.l1_misses, 0);
    EXPECT_GT(k.evictions, 0);
  }
}

// L1 is allocated once: every load packs into one of the slots' buffers, so however many experts
// pass through, the weights live at no more distinct addresses than there are slots, and they are
// the right weights (equal to a fresh load from L3, packed the same way).
TEST_F(ExpertCacheTest, LoadsReuseThePreallocatedSlots) {
  auto c = make(cfg(2));
  std::set<const void*> addresses;
  for (int round = 0; round < 3; ++round)
    for (int64_t layer = 0; layer < 2; ++layer)
      for (int64_t e = 0; e < 4; ++e) {
        std::vector<int64_t> rows(4, 0);
        rows[static_cast<std::size_t>(e)] = 1;
        c->begin_layer(layer, rows);
        const FfnWeights& w = weights(c->acquire(layer, e));
        addresses.insert(w.w1.data.data());
        const FfnWeights ref = reference(layer, e);
        ASSERT_EQ(w.w2.data.size(), ref.w2.data.size());
        EXPECT_EQ(std::memcmp(w.w2.data.data(), ref.w2.data.data(), ref.w2.data.size()), 0) << layer << "/" << e;
        c->release(layer, e);
      }
  EXPECT_LE(addresses.size(), 2u);
  EXPECT_EQ(c->counters().evictions, 22);  // 24 loads into 2 slots
  // The waiting thread checked and packed what it waited for (acquire() right after each begin
  // waits for every one of these loads), and the weights above are still the right ones.
  EXPECT_GT(c->counters().finished_by_waiter, 0);
}

// loading_s is the disk's busy time as the cache sees it: wall time with some load running, loads
// that overlap counted once, so never more than the wall time around them.
TEST_F(ExpertCacheTest, BusyTimeCountsOverlappingLoadsOnce) {
  auto c = make(cfg(8));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t layer = 0; layer < 2; ++layer) run_layer(*c, layer, {0, 1, 2, 3});
  c->drain();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const CacheCounters k = c->counters();
  EXPECT_EQ(k.demand_loads, 8);
  EXPECT_GT(k.loading_s, 0.0);
  EXPECT_LE(k.loading_s, wall);
}

TEST_F(ExpertCacheTest, BudgetBelowOneExpertIsAUsageError) {
  ExpertCacheConfig c = cfg(1);
  c.l1_bytes = slot_ - 1;
  try {
    make(c);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("--l1-bytes"), std::string::npos) << e.what();
  }
}

// The CPU backend on a host with `limit` bytes of memory: a host this small cannot be had here,
// so only its memory figure is a stand-in; allocation, loading and compute are the real backend's.
class SmallHostBackend final : public CpuBackend {
 public:
  SmallHostBackend(const model::ModelConfig& c, Matmul& mm, int64_t limit) : CpuBackend(c, mm), limit_(limit) {}
  int64_t memory_bytes() override { return limit_; }

 private:
  int64_t limit_;
};

// More L1 slots, or more resident experts, than the backend's memory holds: one clear error before
// anything is allocated (a usage error for --l1-bytes, bad input for a model too large to keep).
TEST_F(ExpertCacheTest, MoreExpertsThanTheBackendsMemoryAreRefusedUpFront) {
  SmallHostBackend small(config_, mm_, 3 * slot_);
  try {
    ExpertCache c(
        cfg(4), small, *index_, [](int64_t, int64_t) { return true; }, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(std::string(e.what()).find("--l1-bytes: 4 L1 slots"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MiB of host memory"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(ExpertCache(
      cfg(3), small, *index_, [](int64_t, int64_t) { return true; }, nullptr));
  try {
    ResidentExperts r(small, *index_, config_, [](int64_t, int64_t) { return true; });  // 8 experts
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("this rank's 8 experts need"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--l1-bytes"), std::string::npos) << e.what();
  }
}

TEST_F(ExpertCacheTest, PinnedExpertIsNotEvicted) {
  auto c = make(cfg(2));
  std::vector<int64_t> rows{1, 0, 0, 0};
  c->begin_layer(0, rows);
  const FfnWeights& pinned = weights(c->acquire(0, 0));  // held, not released
  const void* data = pinned.w1.data.data();
  // The next layer needs two experts with only one free slot: the second must wait for the first
  // to be released, and must not take the pinned one's slot.
  run_layer(*c, 1, {1, 2});
  c->drain();
  EXPECT_TRUE(c->in_l1(0, 0));
  EXPECT_EQ(pinned.w1.data.data(), data);
  c->release(0, 0);
  run_layer(*c, 1, {0, 3});
  c->drain();
  EXPECT_FALSE(c->in_l1(0, 0)) << "released, least recently used: evicted";
}

TEST_F(ExpertCacheTest, LruEvictsTheLeastRecentlyUsed) {
  auto c = make(cfg(2));
  run_layer(*c, 0, {0});
  run_layer(*c, 0, {1});
  run_layer(*c, 0, {0});  // 0 is now more recent than 1
  run_layer(*c, 0, {2});
  c->drain();
  EXPECT_TRUE(c->in_l1(0, 0));
  EXPECT_FALSE(c->in_l1(0, 1));
  EXPECT_TRUE(c->in_l1(0, 2));
  const CacheCounters k = c->counters();
  EXPECT_EQ(k.l1_hits, 1);
  EXPECT_EQ(k.l1_misses, 3);
  EXPECT_EQ(k.l3_reads, 3);
}

TEST_F(ExpertCacheTest, HotnessEvictsTheColdest) {
  ExpertCacheConfig k = cfg(2);
  k.warmup = WarmupPolicy::Hotness;
  auto c = make(k);
  for (int i = 0; i < 3; ++i) run_layer(*c, 0, {0});
  run_layer(*c, 0, {1});  // 0 is the least recently used, but used three times as often
  run_layer(*c, 0, {2});
  c->drain();
  EXPECT_TRUE(c->in_l1(0, 0));
  EXPECT_FALSE(c->in_l1(0, 1));
  EXPECT_TRUE(c->in_l1(0, 2));
}

TEST_F(ExpertCacheTest, IdOrderWarmUpFillsEverySlotBeforeServing) {
  ExpertCacheConfig k = cfg(3);
  k.warmup = WarmupPolicy::IdOrder;
  auto c = make(k);
  c->warm_up();  // returns when the slots are loaded
  EXPECT_TRUE(c->in_l1(0, 0));
  EXPECT_TRUE(c->in_l1(0, 1));
  EXPECT_TRUE(c->in_l1(0, 2));
  EXPECT_FALSE(c->in_l1(0, 3));
  run_layer(*c, 0, {1});
  const CacheCounters n = c->counters();
  EXPECT_EQ(n.warmup_loads, 3);
  EXPECT_EQ(n.warmup_used, 1);
  EXPECT_EQ(n.l1_hits, 1);
  EXPECT_EQ(n.demand_loads, 0);
}

TEST_F(ExpertCacheTest, HotnessSettlesOnTheHottestAfterTheWarmUpRequests) {
  ExpertCacheConfig k = cfg(2);
  k.warmup = WarmupPolicy::Hotness;
  k.warmup_requests = 5;
  auto c = make(k);
  for (int i = 0; i < 3; ++i) run_layer(*c, 0, {0, 1});  // the hot pair
  run_layer(*c, 1, {0, 1});  // needs both slots: the hot pair goes, though it is hotter
  c->drain();
  EXPECT_FALSE(c->in_l1(0, 0));
  c->requests_finished(4);  // still warming up: nothing moves
  c->drain();
  EXPECT_FALSE(c->in_l1(0, 0));
  EXPECT_EQ(c->counters().warmup_loads, 0);
  c->requests_finished(5);  // L1 settles on the hottest experts, displacing colder ones
  c->drain();
  EXPECT_TRUE(c->in_l1(0, 0));
  EXPECT_TRUE(c->in_l1(0, 1));
  EXPECT_FALSE(c->in_l1(1, 0));
  EXPECT_EQ(c->counters().warmup_loads, 2);
  c->requests_finished(6);  // once only
  c->drain();
  EXPECT_EQ(c->counters().warmup_loads, 2);
}

TEST_F(ExpertCacheTest, AffinityEvictsTheLowestPredictedUse) {
  // A graph in which expert 0 of layer 0 is used by 90% of tokens and expert 1 by 10%; no
  // next-layer edges, so nothing is prefetched.
  io::AffinityGraph g = empty_graph(2);
  g.frequency = {0.9, 0.1, 0.5, 0.5, 0, 0, 0, 0};
  auto c = make(cfg(2, PrefetchPolicy::Affinity), &g);
  run_layer(*c, 0, {0});
  run_layer(*c, 0, {1});  // 0 is the least recently used, but the most likely to be needed
  run_layer(*c, 0, {2});
  c->drain();
  EXPECT_TRUE(c->in_l1(0, 0));
  EXPECT_FALSE(c->in_l1(0, 1));
  EXPECT_TRUE(c->in_l1(0, 2));
  // The same sequence under LRU evicts expert 0.
  auto lru = make(cfg(2, PrefetchPolicy::Off));
  run_layer(*lru, 0, {0});
  run_layer(*lru, 0, {1});
  run_layer(*lru, 0, {2});
  lru->drain();
  EXPECT_FALSE(lru->in_l1(0, 0));
  EXPECT_TRUE(lru->in_l1(0, 1));
}

TEST_F(ExpertCacheTest, AffinityPrefetchLoadsThePredictedNextLayer) {
  io::AffinityGraph g = empty_graph(1);
  g.next[0 * 4 + 3] = 1.0;  // expert 0 at layer 0 -> expert 3 at layer 1, always
  g.frequency = {1, 0, 0, 0, 0, 0, 0, 1};
  auto c = make(cfg(2, PrefetchPolicy::Affinity), &g);
  run_layer(*c, 0, {0});
  c->drain();
  EXPECT_TRUE(c->in_l1(1, 3)) << "prefetched from the graph";
  run_layer(*c, 1, {3});
  const CacheCounters k = c->counters();
  EXPECT_EQ(k.prefetch_issued, 1);
  EXPECT_EQ(k.prefetch_used, 1);
  EXPECT_EQ(k.l1_hits, 1);
  EXPECT_DOUBLE_EQ(k.prefetch_precision(), 1.0);
}

TEST_F(ExpertCacheTest, L2SurvivesARestart) {
  {
    auto c = make(cfg(1, PrefetchPolicy::Off, true));
    for (int64_t l = 0; l < 2; ++l)
      for (int64_t e = 0; e < 4; ++e) run_layer(*c, l, {e});
    EXPECT_EQ(c->counters().l3_reads, 8);
    EXPECT_EQ(c->counters().l2_bytes_written, 8 * slot_);
  }
  auto c = make(cfg(1, PrefetchPolicy::Off, true));  // a new process would find the same files
  for (int64_t l = 0; l < 2; ++l)
    for (int64_t e = 0; e < 4; ++e) run_layer(*c, l, {e});
  const CacheCounters k = c->counters();
  EXPECT_EQ(k.l3_reads, 0);
  EXPECT_EQ(k.l2_hits, 8);
  EXPECT_DOUBLE_EQ(k.l2_hit_rate(), 1.0);
  EXPECT_EQ(k.pack_s, 0.0) << "L2 holds the packed form: a hit packs nothing";
}

// L2 entries are packed weights: read back into a slot they equal a fresh L3 load packed the same
// way; an L2 written for another layout (another oneDNN, CPU or shape) is not read, but starts empty.
TEST_F(ExpertCacheTest, L2HoldsThePackedFormOfItsLayoutOnly) {
  {
    auto c = make(cfg(1, PrefetchPolicy::Off, true));
    for (int64_t e = 0; e < 4; ++e) run_layer(*c, 1, {e});
  }
  {
    auto c = make(cfg(1, PrefetchPolicy::Off, true));
    for (int64_t e = 0; e < 4; ++e) {
      std::vector<int64_t> rows(4, 0);
      rows[static_cast<std::size_t>(e)] = 1;
      c->begin_layer(1, rows);
      const FfnWeights& w = weights(c->acquire(1, e));
      const FfnWeights ref = reference(1, e);
      for (auto [a, b] : {std::pair{&w.w1, &ref.w1}, std::pair{&w.w3, &ref.w3}, std::pair{&w.w2, &ref.w2}}) {
        ASSERT_EQ(a->data.size(), b->data.size());
        EXPECT_EQ(std::memcmp(a->data.data(), b->data.data(), b->data.size()), 0) << "expert " << e;
        EXPECT_EQ(a->packed != nullptr, b->packed != nullptr);
      }
      c->release(1, e);
    }
    EXPECT_EQ(c->counters().l2_hits, 4);
  }
  const fs::path index = dir_ / "l2" / "index.json";
  std::ifstream in(index);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = text.find("onednn-");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 7, "othlib-");
  std::ofstream(index) << text;
  auto c = make(cfg(1, PrefetchPolicy::Off, true));
  for (int64_t e = 0; e < 4; ++e) run_layer(*c, 1, {e});
  EXPECT_EQ(c->counters().l2_hits, 0);
  EXPECT_EQ(c->counters().l3_reads, 4);
}

TEST_F(ExpertCacheTest, FlippedByteInL2IsDetectedAndHealed) {
  {
    auto c = make(cfg(1, PrefetchPolicy::Off, true));
    run_layer(*c, 0, {1});
  }
  {
    // Flip one byte inside the only entry (it starts at offset 0).
    std::fstream f((dir_ / "l2" / "experts.blob").string(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    char b = 0;
    f.seekg(100);
    f.read(&b, 1);
    b ^= 0x10;
    f.seekp(100);
    f.write(&b, 1);
  }
  {
    auto c = make(cfg(1, PrefetchPolicy::Off, true));
    run_layer(*c, 0, {1});
    const CacheCounters k = c->counters();
    EXPECT_EQ(k.l2_corrupt, 1);
    EXPECT_EQ(k.l2_hits, 0);
    EXPECT_EQ(k.l3_reads, 1) << "refetched from L3";
  }
  auto c = make(cfg(1, PrefetchPolicy::Off, true));
  run_layer(*c, 0, {1});
  EXPECT_EQ(c->counters().l2_hits, 1) << "healed: the refetched copy is in L2 again";
  EXPECT_EQ(c->counters().l2_corrupt, 0);
}

TEST_F(ExpertCacheTest, UnreadableL2IndexStartsEmptyAndRebuilds) {
  {
    auto c = make(cfg(1, PrefetchPolicy::Off, true));
    run_layer(*c, 0, {2});
  }
  std::ofstream((dir_ / "l2" / "index.json").string()) << "{ torn";
  {
    auto c = make(cfg(1, PrefetchPolicy::Off, true));
    run_layer(*c, 0, {2});
    EXPECT_EQ(c->counters().l2_hits, 0);
    EXPECT_EQ(c->counters().l3_reads, 1);
  }
  auto c = make(cfg(1, PrefetchPolicy::Off, true));
  run_layer(*c, 0, {2});
  EXPECT_EQ(c->counters().l2_hits, 1) << "the index was written again";
}

TEST_F(ExpertCacheTest, FullL2KeepsRunningFromL3) {
  ExpertCacheConfig k = cfg(1, PrefetchPolicy::Off, true);
  int64_t entry = 0;  // what one stored expert takes (packed parts, each starting on a page)
  {
    ExpertCacheConfig probe = k;
    probe.l2_dir = (dir_ / "l2-probe").string();
    auto p = make(probe);
    run_layer(*p, 0, {0});
    entry = static_cast<int64_t>(fs::file_size(dir_ / "l2-probe" / "experts.blob"));
  }
  ASSERT_GE(entry, slot_);
  k.l2_bytes = entry + entry / 2;  // room for one expert
  auto c = make(k);
  for (int64_t e = 0; e < 4; ++e) run_layer(*c, 0, {e});
  for (int64_t e = 0; e < 4; ++e) run_layer(*c, 0, {e});
  const CacheCounters n = c->counters();
  EXPECT_EQ(n.l2_bytes_written, slot_);
  EXPECT_EQ(n.l2_hits, 1) << "the one expert that fitted";
  EXPECT_EQ(n.l3_reads, 4 + 3);
  EXPECT_LE(static_cast<int64_t>(fs::file_size(dir_ / "l2" / "experts.blob")), k.l2_bytes);
}

TEST_F(ExpertCacheTest, FlippedByteInL3FailsNamingExpertAndFile) {
  const std::string shard = index_->where(0, 1);
  {
    io::H5Handle f = io::h5_open_file(shard, io::H5Mode::ReadWrite);
    std::vector<float> w1(static_cast<std::size_t>(config_.intermediate_size * config_.hidden_size));
    io::h5_read(f, "/layers/0/experts/1/w1", H5T_NATIVE_FLOAT, w1.data());
    uint32_t bits;
    std::memcpy(&bits, &w1[5], 4);
    bits ^= 1u;  // one flipped bit
    std::memcpy(&w1[5], &bits, 4);
    io::h5_delete(f, "/layers/0/experts/1/w1");
    io::h5_write(f, "/layers/0/experts/1/w1", {config_.intermediate_size, config_.hidden_size}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, w1.data(),
                 true);
  }
  auto c = make(cfg(2));
  std::vector<int64_t> rows{0, 1, 0, 0};
  c->begin_layer(0, rows);
  try {
    c->acquire(0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    const std::string m = e.what();
    EXPECT_NE(m.find(shard), std::string::npos) << m;
    EXPECT_NE(m.find("/layers/0/experts/1"), std::string::npos) << m;
    EXPECT_NE(m.find("checksum"), std::string::npos) << m;
  }
}

// Gate prefetch: the experts the router hints for layer 1 are loaded when layer 0 begins, and layer
// 0's own demand loads do not evict them; the hint is used once layer 1 begins (hits, counted as
// prefetches used).
TEST_F(ExpertCacheTest, GatePrefetchLoadsTheHintedExpertsAndKeepsThem) {
  auto c = make(cfg(4, PrefetchPolicy::Gate));
  EXPECT_TRUE(c->wants_hints());
  EXPECT_FALSE(make(cfg(4, PrefetchPolicy::Lru))->wants_hints());
  c->hint(1, {0, 3, 0, 1});  // experts 1 and 3 of layer 1 predicted
  run_layer(*c, 0, {0, 1});
  c->drain();
  EXPECT_TRUE(c->in_l1(1, 1));
  EXPECT_TRUE(c->in_l1(1, 3));
  EXPECT_FALSE(c->in_l1(1, 0));
  EXPECT_EQ(c->counters().prefetch_issued, 2);
  // Layer 0 again with two other experts: L1 (4 slots) is full, and the victims are layer 0's, not
  // the hinted ones.
  c->hint(1, {0, 3, 0, 1});
  run_layer(*c, 0, {2, 3});
  c->drain();
  EXPECT_TRUE(c->in_l1(1, 1));
  EXPECT_TRUE(c->in_l1(1, 3));
  const int64_t hits = c->counters().l1_hits;
  run_layer(*c, 1, {1, 3});
  EXPECT_EQ(c->counters().l1_hits, hits + 2);
  EXPECT_EQ(c->counters().prefetch_used, 2);
}

// L1 smaller than a layer's experts, every slot holding one the layer still needs, and the layer
// asks first for one that is not in L1 (loaded ahead of it, e.g. prefetched): one of those is
// evicted to make room, or the layer and the loader would wait on each other for ever (it did: a
// hang in expert_batching.sh's np 4 run with 2 slots, about 1 in 12 runs on a loaded machine).
TEST_F(ExpertCacheTest, LayerWaitingOnAFullL1OfItsOwnExpertsProgresses) {
  auto c = make(cfg(2));
  c->begin_layer(1, {0, 1, 0, 1});  // experts 1 and 3 of layer 1: both slots, needed by the layer
  c->drain();
  ASSERT_TRUE(c->in_l1(1, 1));
  ASSERT_TRUE(c->in_l1(1, 3));
  auto first = std::async(std::launch::async, [&] { return &c->acquire(1, 0); });
  if (first.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    ADD_FAILURE() << "acquire(1, 0) still waits after 30 s: the cache deadlocked";
    std::_Exit(1);  // the waiting thread cannot be joined
  }
  const FfnWeights want0 = reference(1, 0);
  EXPECT_EQ(std::memcmp(weights(*first.get()).w1.data.data(), want0.w1.data.data(), want0.w1.data.size()), 0);
  c->release(1, 0);
  for (int64_t e : {1, 3}) {  // the one evicted is read again
    const FfnWeights want = reference(1, e);
    EXPECT_EQ(std::memcmp(weights(c->acquire(1, e)).w1.data.data(), want.w1.data.data(), want.w1.data.size()), 0) << e;
    c->release(1, e);
  }
}

// An affinity graph's routing frequencies are a hotness prior: with --warmup hotness, L1 settles on
// the graph's hottest experts before the first layer, and they stay through a layer that needs
// others (the coldest go first).
TEST_F(ExpertCacheTest, GraphFrequenciesSettleL1BeforeServing) {
  io::AffinityGraph g = empty_graph(2);
  g.frequency.assign(2 * 4, 0.01);
  g.frequency[1 * 4 + 2] = 0.9;  // layer 1, experts 2 and 3
  g.frequency[1 * 4 + 3] = 0.8;
  ExpertCacheConfig c = cfg(3, PrefetchPolicy::Gate);
  c.warmup = WarmupPolicy::Hotness;
  auto cache = make(c, &g);
  cache->drain();
  EXPECT_TRUE(cache->in_l1(1, 2));
  EXPECT_TRUE(cache->in_l1(1, 3));
  EXPECT_EQ(cache->counters().warmup_loads, 3);  // every slot: the third a cold one (all have some frequency)
  run_layer(*cache, 0, {0});
  run_layer(*cache, 0, {1});
  cache->drain();
  EXPECT_TRUE(cache->in_l1(1, 2));
  EXPECT_TRUE(cache->in_l1(1, 3));
}

// Unsure guesses (all wrong here) load only where the compute between two layers leaves the disk
// time for them: with experts of 1.5 MiB (a load of about a millisecond) and layers that begin at
// once, only one layer in eight still loads its guesses; with 20 ms between the layers, every layer
// loads them.
TEST_F(ExpertCacheTest, UnsureGuessesLoadOnlyInGapsLongerThanALoad) {
  convert::SynthConfig s = moerun::testing::tiny_synth_config(1);
  s.model.hidden_size = 256;
  s.model.intermediate_size = 1024;
  convert::write_synthetic_model((dir_ / "big").string(), s, true);
  const io::ExpertShardIndex index = io::ExpertShardIndex::build((dir_ / "big").string(), s.model);
  CpuBackend backend(s.model, mm_);
  for (const int gap_ms : {0, 20}) {
    ExpertCacheConfig c;
    c.l1_bytes = 2 * packed_expert_bytes(mm_, s.model);
    c.prefetch = PrefetchPolicy::Gate;
    c.warmup = WarmupPolicy::None;
    c.io_threads = 1;
    ExpertCache cache(
        c, backend, index, [](int64_t, int64_t) { return true; }, nullptr);
    // Until 64 guesses are judged (wrong: unsure from then on), then 60 layer pairs counted.
    int64_t issued_before = -1, counted = 0;
    for (int i = 0; i < 600 && counted < 60; ++i) {
      const CacheCounters k = cache.counters();
      if (issued_before < 0 && k.prefetch_used + k.prefetch_wasted >= 64) issued_before = k.prefetch_issued;
      counted += issued_before >= 0;
      const int64_t a = i % 4, b = (i + 2) % 4, guess = (b + 1) % 4;
      std::vector<int64_t> hint(4, 0);
      hint[static_cast<std::size_t>(guess)] = 1;
      cache.hint(1, hint);
      run_layer(cache, 0, {a});
      std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
      run_layer(cache, 1, {b});
    }
    ASSERT_EQ(counted, 60) << "the guesses were never judged";
    const CacheCounters n = cache.counters();
    const int64_t issued = n.prefetch_issued - issued_before;  // over the last 60 layer pairs
    EXPECT_LT(n.prefetch_used, n.prefetch_wasted / 4) << "the guesses were meant to be wrong";
    if (gap_ms == 0) {
      EXPECT_LE(issued, 60 / 8 + 1);
      EXPECT_GE(n.prefetch_held, 50);
    } else {
      EXPECT_GE(issued, 50);
      EXPECT_EQ(n.prefetch_held, 0);
    }
  }
}

// The model's shards, every read `delay` longer and logged (which expert, from when to when): the
// tiny model's own reads are too fast for two of them to overlap, and the order of reads is what a
// test checks.
class LoggedSlowSource : public io::ExpertSource {
 public:
  struct Read {
    int64_t layer, expert;
    double start, end;
  };
  LoggedSlowSource(const io::ExpertSource& s, std::chrono::milliseconds delay) : s_(s), delay_(delay) {}
  const model::ModelConfig& config() const override { return s_.config(); }
  AlignedBuffer read_raw(int64_t layer, int64_t expert) const override {
    AlignedBuffer raw;
    read_raw_into(layer, expert, raw);
    return raw;
  }
  void read_raw_into(int64_t layer, int64_t expert, AlignedBuffer& raw) const override {
    const double start = seconds();
    std::this_thread::sleep_for(delay_);
    s_.read_raw_into(layer, expert, raw);
    std::lock_guard<std::mutex> lock(mu_);
    reads_.push_back({layer, expert, start, seconds()});
  }
  uint64_t checksum(int64_t layer, int64_t expert) const override { return s_.checksum(layer, expert); }
  std::string where(int64_t layer, int64_t expert) const override { return s_.where(layer, expert); }
  std::vector<Read> reads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }
  static double seconds() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

 private:
  const io::ExpertSource& s_;
  std::chrono::milliseconds delay_;
  mutable std::mutex mu_;
  mutable std::vector<Read> reads_;
};

// An unsure guess (all wrong here) reads only once the layer's own demand reads are in, even with
// loaders to spare: the guess for layer 1, queued as layer 0 begins, would otherwise read beside
// layer 0's demand and halve its share of the disk. The gaps (15 ms against 5 ms reads) let the
// guesses load at all, so the check is not empty.
TEST_F(ExpertCacheTest, UnsureGuessesReadOnlyAfterTheLayersDemandReads) {
  LoggedSlowSource source(*index_, std::chrono::milliseconds(5));
  ExpertCacheConfig c = cfg(2, PrefetchPolicy::Gate);
  c.io_threads = 4;
  ExpertCache cache(
      c, *backend_, source, [](int64_t, int64_t) { return true; }, nullptr);
  constexpr int kSteps = 120, kJudged = 80;  // after kJudged steps the guesses are judged unsure
  std::vector<std::pair<double, double>> windows;  // per step: layer 0 begins, layer 1 begins
  for (int i = 0; i < kSteps; ++i) {
    const int64_t a = i % 4, b = (i + 2) % 4, guess = (b + 1) % 4;
    std::vector<int64_t> hint(4, 0);
    hint[static_cast<std::size_t>(guess)] = 1;
    cache.hint(1, hint);
    const double begin0 = LoggedSlowSource::seconds();
    run_layer(cache, 0, {a});
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    windows.push_back({begin0, LoggedSlowSource::seconds()});
    run_layer(cache, 1, {b});
  }
  cache.drain();
  const CacheCounters n = cache.counters();
  ASSERT_LT(n.prefetch_used, n.prefetch_wasted / 4) << "the guesses were meant to be wrong";
  int guesses = 0, beside_demand = 0;
  const std::vector<LoggedSlowSource::Read> reads = source.reads();
  for (int i = kJudged; i < kSteps; ++i) {
    const auto [from, to] = windows[static_cast<std::size_t>(i)];
    for (const auto& g : reads) {
      if (g.layer != 1 || g.start < from || g.start >= to) continue;  // layer 1 before it begins: a guess
      ++guesses;
      for (const auto& d : reads)
        if (d.layer == 0 && d.start >= from && d.start < to && g.start < d.end) ++beside_demand;
    }
  }
  EXPECT_GE(guesses, 10);
  EXPECT_EQ(beside_demand, 0);
}

// A load handed to the waiting thread fails there as a loader's own would: a flipped bit in L3 is
// the same BadInput naming the file and the expert, thrown by acquire(). The read is slowed so that
// acquire() already waits when it ends (the handoff's condition).
TEST_F(ExpertCacheTest, HandedOffLoadWithAFlippedBitFailsInTheWaitingThread) {
  const std::string shard = index_->where(0, 1);
  {
    io::H5Handle f = io::h5_open_file(shard, io::H5Mode::ReadWrite);
    std::vector<float> w1(static_cast<std::size_t>(config_.intermediate_size * config_.hidden_size));
    io::h5_read(f, "/layers/0/experts/1/w1", H5T_NATIVE_FLOAT, w1.data());
    w1[5] = std::nextafter(w1[5], 1.0f);
    io::h5_delete(f, "/layers/0/experts/1/w1");
    io::h5_write(f, "/layers/0/experts/1/w1", {config_.intermediate_size, config_.hidden_size}, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, w1.data(),
                 true);
  }
  LoggedSlowSource source(*index_, std::chrono::milliseconds(50));
  ExpertCache cache(
      cfg(2), *backend_, source, [](int64_t, int64_t) { return true; }, nullptr);
  cache.begin_layer(0, {0, 1, 0, 0});
  try {
    cache.acquire(0, 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    const std::string m = e.what();
    EXPECT_NE(m.find(shard), std::string::npos) << m;
    EXPECT_NE(m.find("/layers/0/experts/1"), std::string::npos) << m;
  }
  EXPECT_EQ(cache.counters().finished_by_waiter, 1);
}

TEST(PrefetchPolicy, ParsesAndRejects) {
  EXPECT_EQ(parse_prefetch("affinity"), PrefetchPolicy::Affinity);
  EXPECT_EQ(parse_prefetch("lru"), PrefetchPolicy::Lru);
  EXPECT_EQ(parse_prefetch("off"), PrefetchPolicy::Off);
  EXPECT_EQ(parse_prefetch("gate"), PrefetchPolicy::Gate);
  EXPECT_STREQ(prefetch_name(PrefetchPolicy::Gate), "gate");
  EXPECT_THROW(parse_prefetch("mru"), Error);
}

}  // namespace
}  // namespace moerun::experts

// Polling the swap control file, loading and verifying in the background, swapping in between steps.
#include "runtime/hot_swap.hpp"

#include <chrono>
#include <climits>
#include <set>
#include <thread>
#include <sys/stat.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/xxh64.hpp"
#include "comm/collectives.hpp"

namespace moerun::runtime {
namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

HotSwap::HotSwap(std::string control_file, const model::ModelConfig& config, io::Hdf5Probe probe, bool quiet)
    : path_(std::move(control_file)), config_(config), probe_(std::move(probe)), quiet_(quiet) {}

HotSwap::~HotSwap() {
  if (loader_.joinable()) loader_.join();
}

bool HotSwap::changed() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return false;  // no request (yet)
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (mtime == seen_mtime_ns_ && st.st_size == seen_size_ && st.st_ino == seen_inode_) return false;
  seen_mtime_ns_ = mtime;
  seen_size_ = st.st_size;
  seen_inode_ = st.st_ino;
  version_ = static_cast<int64_t>(Xxh64().value(mtime).value(st.st_size).value(st.st_ino).digest() >> 2) + 1;
  return true;
}

void HotSwap::launch(const experts::ExpertStore& store) {
  loaded_ = false;
  fresh_.clear();
  listed_.clear();
  error_ = nullptr;
  loader_ = std::thread([this, &store] {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const std::vector<io::ExpertSwap> swaps = io::read_swap_control(path_, config_);
      std::set<std::string> files;
      for (const auto& s : swaps) files.insert(s.shard);
      probe_.check({files.begin(), files.end()});
      fresh_ = io::read_swap_experts(swaps, config_, [this, &store](int64_t l, int64_t e) {
        listed_.insert({l, e});
        return store.owns(l, e);
      });
    } catch (...) {
      error_ = std::current_exception();
      fresh_.clear();
    }
    load_s_ = since(t0);
    loaded_ = true;
  });
}

std::vector<int64_t> HotSwap::swapped_flags() const {
  std::vector<int64_t> f(static_cast<std::size_t>(config_.num_moe_layers() * config_.num_experts), 0);
  for (const auto& [l, e] : swapped_) f[static_cast<std::size_t>(l * config_.num_experts + e)] = 1;
  return f;
}

void HotSwap::refuse(const std::string& why) {
  ++c_.failed;
  log::warn("hot swap refused, the old weights stay: ", why);
}

void HotSwap::finish(experts::ExpertStore& store) {
  loader_.join();
  c_.load_seconds += load_s_;
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      refuse(e.what());
    }
    fresh_.clear();
    return;
  }
  apply(store);
}

void HotSwap::apply(experts::ExpertStore& store) {
  // Everything was verified: the swap itself cannot fail on bad input.
  const auto t0 = std::chrono::steady_clock::now();
  for (io::NewExpertWeights& w : fresh_) store.replace(w.layer, w.expert, w.raw.data(), w.xxh64, w.shard);
  const double pause = since(t0);
  const auto n = static_cast<int64_t>(fresh_.size());
  fresh_.clear();
  swapped_.insert(listed_.begin(), listed_.end());
  ++c_.applied;
  c_.experts += n;
  c_.pause_seconds += pause;
  if (n > 0) c_.max_pause_ms_per_expert = std::max(c_.max_pause_ms_per_expert, 1e3 * pause / static_cast<double>(n));
  if (!quiet_ && n > 0)
    log::info("hot swap: ", n, " expert(s) from ", path_, ": read and verified in ", 1e3 * load_s_, " ms, swapped in ", 1e3 * pause,
              " ms (", 1e3 * pause / static_cast<double>(n), " ms per expert)");
}

void HotSwap::poll_agreed(experts::ExpertStore* store, MPI_Comm world, double timeout_s, bool wait) {
  // This rank's state: 0 nothing loading, -1 loading, v > 0 version v read (and verified or refused).
  int64_t state = 0;
  bool refused = false;
  if (store) {
    if (loader_.joinable() && loaded_) {
      if (changed()) {  // a newer version came meanwhile: that one is what the others will load
        loader_.join();
        fresh_.clear();
        launch(*store);
      }
    } else if (!loader_.joinable() && changed()) {
      launch(*store);
    }
    while (wait && loader_.joinable() && !loaded_) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    state = !loader_.joinable() ? 0 : loaded_ ? version_ : -1;
    refused = loader_.joinable() && loaded_ && error_ != nullptr;
  }
  // One maximum over the ranks: the highest and (negated) lowest state, and whether any refused.
  constexpr int64_t kNone = INT64_MIN + 1;
  std::vector<int64_t> v = store ? std::vector<int64_t>{state, -state, refused ? 1 : 0} : std::vector<int64_t>{kNone, kNone, 0};
  comm::allreduce_max_timed(v, world, timeout_s, "hot swap agreement");
  const int64_t hi = v[0], lo = -v[1];
  if (!store || !(hi > 0 && lo == hi)) return;  // not every expert rank has the same version ready
  loader_.join();
  c_.load_seconds += load_s_;
  if (v[2] == 0) {
    apply(*store);
    return;
  }
  fresh_.clear();
  if (!error_) {
    refuse("another rank refused the control file");
    return;
  }
  try {
    std::rethrow_exception(error_);
  } catch (const std::exception& e) {
    refuse(e.what());
  }
}

void HotSwap::start(experts::ExpertStore& store) {
  if (!changed()) return;
  launch(store);
  finish(store);
}

void HotSwap::poll(experts::ExpertStore& store) {
  if (loader_.joinable()) {  // a load is running or done, not yet applied
    if (!loaded_) return;  // still reading: the steps go on with the old weights
    finish(store);
  }
  if (changed()) launch(store);
}

}  // namespace moerun::runtime

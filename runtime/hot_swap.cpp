// Polling the swap control file, loading and verifying in the background, swapping in between steps.
#include "runtime/hot_swap.hpp"

#include <chrono>
#include <set>
#include <sys/stat.h>

#include "base/error.hpp"
#include "base/log.hpp"

namespace moerun::runtime {
namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

HotSwap::HotSwap(std::string control_file, const io::ModelConfig& config, io::Hdf5Probe probe, bool quiet)
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
  return true;
}

void HotSwap::launch(const experts::ExpertStore& store) {
  loaded_ = false;
  fresh_.clear();
  error_ = nullptr;
  loader_ = std::thread([this, &store] {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      const std::vector<io::ExpertSwap> swaps = io::read_swap_control(path_, config_);
      std::set<std::string> files;
      for (const auto& s : swaps) files.insert(s.shard);
      probe_.check({files.begin(), files.end()});
      fresh_ = io::read_swap_experts(swaps, config_, [&store](int64_t l, int64_t e) { return store.owns(l, e); });
    } catch (...) {
      error_ = std::current_exception();
      fresh_.clear();
    }
    load_s_ = since(t0);
    loaded_ = true;
  });
}

void HotSwap::finish(experts::ExpertStore& store) {
  loader_.join();
  c_.load_seconds += load_s_;
  if (error_) {
    ++c_.failed;
    try {
      std::rethrow_exception(error_);
    } catch (const Error& e) {
      log::warn("hot swap refused, the old weights stay: ", e.what());
    } catch (const std::exception& e) {
      log::warn("hot swap refused, the old weights stay: ", e.what());
    }
    return;
  }
  // Everything was verified: the swap itself cannot fail on bad input.
  const auto t0 = std::chrono::steady_clock::now();
  for (io::NewExpertWeights& w : fresh_) store.replace(w.layer, w.expert, w.raw.data(), w.xxh64, w.shard);
  const double pause = since(t0);
  const auto n = static_cast<int64_t>(fresh_.size());
  fresh_.clear();
  ++c_.applied;
  c_.experts += n;
  c_.pause_seconds += pause;
  if (n > 0) c_.max_pause_ms_per_expert = std::max(c_.max_pause_ms_per_expert, 1e3 * pause / static_cast<double>(n));
  if (!quiet_ && n > 0)
    log::info("hot swap: ", n, " expert(s) from ", path_, ": read and verified in ", 1e3 * load_s_, " ms, swapped in ", 1e3 * pause,
              " ms (", 1e3 * pause / static_cast<double>(n), " ms per expert)");
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

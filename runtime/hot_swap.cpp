// Polling the swap control file and swapping verified experts in.
#include "runtime/hot_swap.hpp"

#include <chrono>
#include <set>
#include <sys/stat.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "io/expert_swap.hpp"

namespace moerun::runtime {

HotSwap::HotSwap(std::string control_file, const io::ModelConfig& config, io::Hdf5Probe probe, bool quiet)
    : path_(std::move(control_file)), config_(config), probe_(std::move(probe)), quiet_(quiet) {}

void HotSwap::poll(experts::ExpertStore& store) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return;  // no request (yet)
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (mtime == seen_mtime_ns_ && st.st_size == seen_size_ && st.st_ino == seen_inode_) return;
  seen_mtime_ns_ = mtime;
  seen_size_ = st.st_size;
  seen_inode_ = st.st_ino;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    const std::vector<io::ExpertSwap> swaps = io::read_swap_control(path_, config_);
    std::set<std::string> files;
    for (const auto& s : swaps) files.insert(s.shard);
    probe_.check({files.begin(), files.end()});
    const auto owned = [&store](int64_t l, int64_t e) { return store.owns(l, e); };
    const std::vector<io::NewExpertWeights> fresh = io::read_swap_experts(swaps, config_, owned);
    // Everything verified: now the swap itself, which cannot fail on bad input.
    for (const io::NewExpertWeights& w : fresh) store.replace(w.layer, w.expert, w.raw.data(), w.xxh64, w.shard);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto n = static_cast<int64_t>(fresh.size());
    ++c_.applied;
    c_.experts += n;
    c_.seconds += s;
    if (n > 0) c_.max_ms_per_expert = std::max(c_.max_ms_per_expert, 1e3 * s / static_cast<double>(n));
    if (!quiet_ && n > 0)
      log::info("hot swap: ", n, " expert(s) from ", path_, " in ", 1e3 * s, " ms (", 1e3 * s / static_cast<double>(n),
                " ms per expert)");
  } catch (const Error& e) {
    ++c_.failed;
    log::warn("hot swap refused, the old weights stay: ", e.what());
  }
}

}  // namespace moerun::runtime

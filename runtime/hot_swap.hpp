// HotSwap: replaces experts while a run goes on (`infer --swap-control FILE`, io/expert_swap.hpp).
// Every rank that holds experts looks at the control file at each step boundary (one stat). When it
// is new or changed, a background thread reads the listed experts this rank owns and verifies them
// all (HDF5 probe, shapes, NaN scan, xxh64) while steps go on; at the first step boundary after
// that, the verified weights are packed into place, so a step in flight finishes on the old weights
// and no request is lost or run twice. The pause is the packing only. A control file that fails any
// check changes nothing on that rank and is reported in one warning; it is not retried until it
// changes again. A control file present at the start is applied before the first step.
// Distributed (poll_agreed), the ranks agree first: a control file is applied at the first step
// boundary where every expert rank has read and verified the same version of it, on all of them at
// once, so that the replicas of an expert never serve different weights; if any rank refused it,
// none applies it.
#pragma once
#include <atomic>
#include <cstdint>
#include <exception>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <mpi.h>

#include "base/counter_fields.hpp"
#include "experts/expert_store.hpp"
#include "io/expert_swap.hpp"
#include "io/hdf5_probe.hpp"
#include "model/model_config.hpp"

namespace moerun::runtime {

struct HotSwapCounters {
  int64_t applied = 0;  // control files applied (on this rank; the maximum over ranks in the report)
  int64_t experts = 0;  // experts swapped
  int64_t failed = 0;  // control files refused
  double load_seconds = 0;  // reading and verifying, in the background
  double pause_seconds = 0;  // swapping in at step boundaries (serving waits for this)
  double max_pause_ms_per_expert = 0;  // of one control file: its pause divided by its experts

  double pause_ms_per_expert() const { return experts ? 1e3 * pause_seconds / static_cast<double>(experts) : 0.0; }
  static const std::vector<CounterField<HotSwapCounters>>& fields() {
    using H = HotSwapCounters;
    static const std::vector<CounterField<H>> f{counter("applied", &H::applied, Combine::Max),
                                                counter("experts", &H::experts),
                                                counter("failed", &H::failed),
                                                counter("load_seconds", &H::load_seconds),
                                                counter("pause_seconds", &H::pause_seconds),
                                                counter("max_pause_ms_per_expert", &H::max_pause_ms_per_expert, Combine::Max)};
    return f;
  }
};

class HotSwap {
 public:
  HotSwap(std::string control_file, const model::ModelConfig& config, io::Hdf5Probe probe, bool quiet);
  ~HotSwap();
  HotSwap(const HotSwap&) = delete;
  HotSwap& operator=(const HotSwap&) = delete;
  // Before the first step: a control file already there is read, verified and applied now.
  void start(experts::ExpertStore& store);
  // At a step boundary, with nothing acquired from `store`.
  void poll(experts::ExpertStore& store);
  // The same on every rank of `world` (collective): `store` null on ranks without experts. With
  // `wait`, before the first step: a load under way is waited for.
  void poll_agreed(experts::ExpertStore* store, MPI_Comm world, double timeout_s, bool wait = false);
  const HotSwapCounters& counters() const { return c_; }
  // Every expert a control file applied on this rank named (held here or not), as [layer * E + expert] flags.
  std::vector<int64_t> swapped_flags() const;

 private:
  bool changed();  // the control file exists and is not the version last looked at
  void launch(const experts::ExpertStore& store);
  void finish(experts::ExpertStore& store);  // joins the loader and applies (or reports) its result
  void apply(experts::ExpertStore& store);  // the loaded experts into the store
  void refuse(const std::string& why);  // a refused control file: counted, one warning

  std::string path_;
  model::ModelConfig config_;
  io::Hdf5Probe probe_;
  bool quiet_;
  // Identity of the version last looked at: modification time, size, inode.
  int64_t seen_mtime_ns_ = -1, seen_size_ = -1;
  uint64_t seen_inode_ = 0;
  int64_t version_ = 0;  // of the version being loaded: > 0, from its identity
  // The background load: its thread, and what it leaves (read once it has been joined).
  std::thread loader_;
  std::atomic<bool> loaded_{false};  // set by the loader as its last act (polled, then joined)
  std::vector<io::NewExpertWeights> fresh_;
  std::set<std::pair<int64_t, int64_t>> listed_;  // every expert the loaded control file names
  std::set<std::pair<int64_t, int64_t>> swapped_;  // every expert applied control files named
  std::exception_ptr error_;
  double load_s_ = 0;
  HotSwapCounters c_;
};

}  // namespace moerun::runtime

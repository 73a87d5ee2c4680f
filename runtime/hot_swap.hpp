// HotSwap: replaces experts while a run goes on (`infer --swap-control FILE`, io/expert_swap.hpp).
// Every rank that holds experts looks at the control file at each step boundary (one stat); when it
// is new or changed, the rank reads the listed experts it owns, verifies them all (HDF5 probe,
// shapes, NaN scan, xxh64), and only then swaps them in, before the next step: a step in flight
// finishes on the old weights, and no request is lost or run twice. A control file that fails any
// check changes nothing on that rank and is reported in one warning; it is not retried until it
// changes again.
#pragma once
#include <cstdint>
#include <string>

#include "experts/expert_store.hpp"
#include "io/hdf5_probe.hpp"
#include "io/model_config.hpp"

namespace moerun::runtime {

struct HotSwapCounters {
  int64_t applied = 0;       // control files applied (on this rank; the maximum over ranks in the report)
  int64_t experts = 0;       // experts swapped
  int64_t failed = 0;        // control files refused
  double seconds = 0;        // reading, verifying and swapping, in total
  double max_ms_per_expert = 0;  // of one control file: its time divided by its experts

  double ms_per_expert() const { return experts ? 1e3 * seconds / static_cast<double>(experts) : 0.0; }
};

class HotSwap {
 public:
  HotSwap(std::string control_file, const io::ModelConfig& config, io::Hdf5Probe probe, bool quiet);
  // At a step boundary, with nothing acquired from `store`.
  void poll(experts::ExpertStore& store);
  const HotSwapCounters& counters() const { return c_; }

 private:
  std::string path_;
  io::ModelConfig config_;
  io::Hdf5Probe probe_;
  bool quiet_;
  // Identity of the version last looked at: modification time, size, inode.
  int64_t seen_mtime_ns_ = -1, seen_size_ = -1;
  uint64_t seen_inode_ = 0;
  HotSwapCounters c_;
};

}  // namespace moerun::runtime

// Hot-swap requests (`infer --swap-control FILE`): which experts get new weights, from which shard
// file, and the reading and verification of those weights. The control file is JSON:
//   {"swaps": [{"shard": "PATH", "experts": [[layer, expert], ...] | "all"}, ...]}
// PATH is relative to the control file's directory unless absolute; the shard has the layout of
// the model's experts-*.h5 (DESIGN §3), each group with its xxh64. Everything is checked before any
// weight changes: shapes and dtype against the model, the NaN scan, the checksum.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/aligned_buffer.hpp"
#include "model/model_config.hpp"

namespace moerun::io {

struct ExpertSwap {
  std::string shard;  // resolved path
  std::vector<std::pair<int64_t, int64_t>> experts;  // empty with all = true
  bool all = false;  // every expert the shard holds
};

struct NewExpertWeights {
  int64_t layer = 0, expert = 0;
  uint64_t xxh64 = 0;
  std::string shard;
  AlignedBuffer raw;  // w1‖w3‖w2 as stored, verified
};

// Parses the control file; BadInput naming the file and field.
std::vector<ExpertSwap> read_swap_control(const std::string& path, const model::ModelConfig& c);

// Reads and verifies the experts of `swaps` for which `wanted(layer, expert)` holds (the experts of
// this rank). BadInput naming the shard and group on any problem; nothing is returned then.
std::vector<NewExpertWeights> read_swap_experts(const std::vector<ExpertSwap>& swaps, const model::ModelConfig& c,
                                                const std::function<bool(int64_t, int64_t)>& wanted);

}  // namespace moerun::io

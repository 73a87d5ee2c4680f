// `moerun bench deltanet`: Gated DeltaNet's token mixer (the conv, the gated delta rule, the gated
// norm; not the projections, which are GEMMs `bench gemm` measures) for one layer of a real shape:
// a prompt's prefill in the chunked form against the token-by-token recurrence, and a decode step
// of N sequences, each against its FLOP count and the bytes of state it reads and writes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/blocks/gated_deltanet.hpp"

namespace moerun::bench {

struct DeltaNetBenchConfig {
  runtime::DeltaNetShape shape;  // deltanet_bench_shape
  std::vector<int64_t> prompts{512, 2048};
  std::vector<int64_t> batch{1, 8, 32};
  int iters = 5, warmup = 1;
  void validate() const;
};

// qwen3_next (Qwen3-Next-80B-A3B: 16 key heads, 32 value heads of 128, conv 4) or qwen3_5_moe
// (Qwen3.5-35B-A3B: 16 key heads of 128, 32 value heads of 128). Usage error otherwise.
runtime::DeltaNetShape deltanet_bench_shape(const std::string& name);

struct DeltaNetBenchRow {
  std::string phase;  // "prefill" (one sequence of `tokens`) or "decode" (`tokens` sequences, one token each)
  int64_t tokens;
  double chunked_s, recurrent_s;  // median seconds (decode: recurrent only, chunked_s 0)
  double flops;  // of the recurrence (the chunked form does about as many)
  double state_bytes;  // recurrent state read and written (decode: all sequences')
};

std::vector<DeltaNetBenchRow> run_deltanet_bench(const DeltaNetBenchConfig& cfg);
std::string deltanet_bench_table(const DeltaNetBenchConfig& cfg, const std::vector<DeltaNetBenchRow>& rows);
std::string deltanet_bench_json(const DeltaNetBenchConfig& cfg, const std::vector<DeltaNetBenchRow>& rows);

}  // namespace moerun::bench

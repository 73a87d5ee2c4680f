// `moerun bench layer`: one whole MoE layer (gate, permute, experts, combine, and a shared expert
// where the shape has one) timed against plain matmuls of the same dtype and the same expert FLOPs,
// measured in the same run: oneDNN for the CPU backend, cuBLAS for the CUDA one (experts in device
// memory, rows copied in and out per layer).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "experts/backend.hpp"

namespace moerun::bench {

struct LayerBenchConfig {
  int64_t hidden = 1024;
  int64_t experts = 8;
  int64_t intermediate = 3584;
  int64_t top_k = 2;
  int64_t shared = 0;  // > 0: a shared expert of this width on every token (DeepSeek's n_shared x intermediate), timed with the layer
  std::vector<int64_t> tokens{64, 512};
  std::vector<DType> dtypes{DType::F32, DType::BF16};
  int iters = 10;
  int warmup = 2;
  uint64_t seed = 1;
  experts::BackendSpec backend;  // device cuda: experts on the GPU, baseline cuBLAS
  void validate() const;
};

struct LayerBenchRow {
  DType dtype;
  int64_t tokens;
  double layer_s;  // median seconds per layer
  double layer_gflops;  // (gate + expert FLOPs) / layer_s
  double matmul_s;
  double matmul_gflops;
  double ratio;  // layer_gflops / matmul_gflops
  double permute_s, experts_s, combine_s, gate_s, shared_s;  // median breakdown
  double copy_s;  // of experts_s: rows to and from the device (0 on the CPU)
};

std::vector<LayerBenchRow> run_layer_bench(const LayerBenchConfig& cfg);
// nccl-tests style table with a closing verdict line (target ratio at the largest size: >= 0.8 on
// the CPU, >= 0.6 on the GPU, where the rows also cross PCIe).
std::string layer_bench_table(const LayerBenchConfig& cfg, const std::vector<LayerBenchRow>& rows);
std::string layer_bench_json(const LayerBenchConfig& cfg, const std::vector<LayerBenchRow>& rows);

}  // namespace moerun::bench

// `moerun bench gemm`: one expert-shaped weight at the row counts decode and prefill give an expert
// (1-4 rows a step in decode, tens in a prefill step), run as the model runs it (Matmul, with the
// hand-written kernels of base/small_m_matmul where it picks them) and by oneDNN alone, in the same
// run. There are enough matrices that they stream from memory, as a layer's experts do, and this
// machine's read bandwidth over the same bytes is measured too: decode GEMMs are bound by it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "base/quant_format.hpp"

namespace moerun::bench {

struct GemmBenchConfig {
  int64_t rows = 3584;  // W [rows, cols]: an expert's w1 at hidden 1024, intermediate 3584
  int64_t cols = 1024;
  int64_t weight_mb = 512;  // per dtype: as many matrices as take this many MB (at least 2; at most half the host's memory)
  std::vector<int64_t> m{1, 2, 4, 16, 32, 64, 128};
  std::vector<DType> dtypes{DType::F32, DType::BF16};
  // q8/q4 rows (quant_matmul, activations quantized inside the timing) after the dtypes; their
  // baseline is moerun's bf16 row at the same M, which needs bf16 in dtypes.
  std::vector<WeightScheme> schemes;
  int iters = 5;  // passes over all matrices; the best is reported
  void validate() const;
};

struct GemmBenchRow {
  DType dtype;
  WeightScheme scheme = WeightScheme::Plain;  // q8/q4: `dtype` is bf16, the baseline moerun's bf16
  int64_t m;
  std::string kernel;  // what Matmul runs at this M: "small-m", "panel" or "oneDNN"
  int64_t matrices;  // of this dtype, weight_mb / bytes of one
  double moerun_s;  // per matrix, best pass
  double onednn_s;  // q8/q4 rows: moerun's bf16 at this M
  // The first call at this M less the next one (on another matrix): what a step pays the first time
  // it meets M. oneDNN creates its primitive then. Measured for oneDNN first, so moerun's figure
  // means something only where its own kernel runs (elsewhere oneDNN's primitive cache has it).
  double moerun_first_extra_s, onednn_first_extra_s;
  double weight_gbps;  // weight bytes (as packed in memory) / moerun_s
  double moerun_gflops, onednn_gflops;
  double speedup;  // onednn_s / moerun_s
};

struct GemmBenchResult {
  double read_gbps = 0;  // a plain read of the same matrices, best pass
  std::vector<GemmBenchRow> rows;
};

GemmBenchResult run_gemm_bench(const GemmBenchConfig& cfg);
// Table with closing verdict lines: weights stream at >= 0.7 of the read bandwidth at M = 1 (plain),
// >= 0.8 in packed bytes (q8/q4).
std::string gemm_bench_table(const GemmBenchConfig& cfg, const GemmBenchResult& r);
std::string gemm_bench_json(const GemmBenchConfig& cfg, const GemmBenchResult& r);

}  // namespace moerun::bench

// The CPU expert backend: experts packed for oneDNN in host memory (expert_packing), FFNs computed
// one expert at a time on the calling thread (base/swiglu_ffn). Today's code behind the backend seam:
// its results are the ones every other backend is tested against.
#pragma once
#include <memory>
#include <mutex>

#include "experts/backend.hpp"
#include "base/swiglu_ffn.hpp"
#include "experts/cpu/expert_packing.hpp"

namespace moerun::experts {

// An expert as the CPU backend holds it.
class CpuExpert final : public ResidentExpert {
 public:
  FfnWeights w;
  BufferInfo buffer() const override;
};

// Its experts' packed form is what L2 keeps (StoredForm), and `bench layer` times its oneDNN GEMM.
class CpuBackend : public ExpertBackend, public StoredForm, public BackendTiming {
 public:
  // `weights`: where experts are allocated (base/huge_page_pool); null: the C heap.
  CpuBackend(const model::ModelConfig& config, Matmul& compute, std::shared_ptr<HugePagePool> weights = nullptr)
      : config_(config), mm_(compute), activation_(activation_of(config)), weight_memory_(std::move(weights)) {}
  std::string describe() const override;
  MemoryKind weight_memory() const override { return MemoryKind::Host; }
  int64_t expert_bytes() override;
  int64_t memory_bytes() override;
  model::WeightFormat weight_format() const override { return config_.expert_format; }
  const StoredForm* stored_form() const override { return this; }
  BackendTiming* timing() override { return this; }
  std::string name() const override;
  std::vector<io::BlobPart> parts(ResidentExpert& e) const override;
  void check_finite(ResidentExpert& e, const std::string& where, const std::string& group) const override;
  std::unique_ptr<ResidentExpert> allocate_expert() override;
  void load_expert(const void* raw, ResidentExpert& into) override;
  void begin(const float* gathered, int64_t rows, float* results) override;
  RowBuffers row_buffers(int64_t rows) override;
  void run(const ExpertRun& r) override;
  // Runs go one expert per thread (largest first) where that gives the same bits and balances
  // (thread_per_expert): a GEMM of a few rows against a small expert matrix is too short to split
  // across threads without them waiting at its barriers (Qwen3-MoE's 384 x 1024, in decode and in
  // a prefill step's ~8 rows per expert). Otherwise each GEMM is split as run() does.
  void run_all(const std::vector<ExpertRun>& runs) override;
  void finish() override {}
  std::vector<double> dense_matmul_seconds(int64_t M, int64_t N, int64_t K, int warmup, int iters) override;

 private:
  model::ModelConfig config_;
  Matmul& mm_;  // the compute thread's
  // Shapes and layouts of experts, for any thread (I/O threads allocate experts while mm_ computes).
  mutable std::mutex layout_mu_;
  mutable Matmul layout_mm_;
  FfnActivation activation_;
  std::shared_ptr<HugePagePool> weight_memory_;  // the experts' matrices, many to a huge page
  FfnScratch scratch_;
  struct ThreadCompute {  // run_all's per-thread GEMM engine and scratch
    std::unique_ptr<Matmul> mm;
    FfnScratch scratch;
  };
  std::vector<ThreadCompute> threads_;
  std::vector<std::size_t> order_;  // run_all's runs, largest first
  // Whether run_all gives whole experts to threads: every run gets the same bits on one thread
  // (any row count where the kernels split by output columns; else small-M runs only), and no run
  // costs more than a thread's share.
  bool thread_per_expert(const std::vector<ExpertRun>& runs, int threads) const;
  AlignedBuffer gathered_buf_, results_buf_;
  const float* gathered_ = nullptr;
  float* results_ = nullptr;
};

}  // namespace moerun::experts

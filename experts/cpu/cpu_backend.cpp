// The CPU expert backend.
#include "experts/cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>

#include <chrono>
#include <cmath>
#include <random>

#include "base/error.hpp"
#include "base/small_m_matmul.hpp"
#include "base/host.hpp"
#include "experts/cpu/expert_packing.hpp"

namespace moerun::experts {

BufferInfo CpuExpert::buffer() const {
  BufferInfo b{MemoryKind::Host, 0, 0};
  for (const WeightMatrix* m : {&w.w1, &w.w3, &w.w2}) {
    b.bytes += m->data.size();
    b.allocated += m->data.capacity();
  }
  b.bytes += w.bias.size();
  b.allocated += w.bias.capacity();
  return b;
}

std::vector<io::BlobPart> CpuBackend::parts(ResidentExpert& e) const {
  std::vector<io::BlobPart> parts;
  FfnWeights& w = static_cast<CpuExpert&>(e).w;
  for (WeightMatrix* m : {&w.w1, &w.w3, &w.w2}) parts.push_back({m->data.data(), m->data.size(), m->data.capacity()});
  if (w.bias.size() > 0) parts.push_back({w.bias.data(), w.bias.size(), w.bias.capacity()});
  return parts;
}

void CpuBackend::check_finite(ResidentExpert& e, const std::string& where, const std::string& group) const {
  check_packed_finite(static_cast<CpuExpert&>(e).w, config_, where, group);
}

int64_t CpuBackend::memory_bytes() {
  return mappable_memory_bytes();
}

std::string CpuBackend::describe() const {
  return str("cpu (oneDNN, ", Matmul::isa_name(), ")");
}

int64_t CpuBackend::expert_bytes() {
  std::lock_guard<std::mutex> lock(layout_mu_);
  return packed_expert_bytes(layout_mm_, config_);
}

std::string CpuBackend::name() const {
  std::lock_guard<std::mutex> lock(layout_mu_);
  return expert_layout_name(layout_mm_, config_);
}

std::unique_ptr<ResidentExpert> CpuBackend::allocate_expert() {
  auto e = std::make_unique<CpuExpert>();
  for (WeightMatrix* m : {&e->w.w1, &e->w.w3, &e->w.w2}) m->data.place_in(weight_memory_);
  std::lock_guard<std::mutex> lock(layout_mu_);
  preallocate_expert(layout_mm_, config_, e->w);
  return e;
}

void CpuBackend::load_expert(const void* raw, ResidentExpert& into) {
  // Packing runs oneDNN reorders, and I/O threads call this concurrently: one engine per thread.
  thread_local Matmul mm;
  pack_expert_from_raw(mm, raw, config_, static_cast<CpuExpert&>(into).w);
}

RowBuffers CpuBackend::row_buffers(int64_t rows) {
  const std::size_t bytes = static_cast<std::size_t>(rows * config_.hidden_size) * sizeof(float);
  gathered_buf_.resize(bytes);
  results_buf_.resize(bytes);
  return {gathered_buf_.as<float>(), results_buf_.as<float>()};
}

void CpuBackend::begin(const float* gathered, int64_t rows, float* results) {
  (void)rows;
  gathered_ = gathered;
  results_ = results;
}

void CpuBackend::run(const ExpertRun& r) {
  const int64_t d = config_.hidden_size;
  swiglu_ffn_forward(mm_, gathered_ + r.offset * d, r.rows, static_cast<const CpuExpert&>(*r.expert).w, results_ + r.offset * d, scratch_,
                     activation_);
}

namespace {

// Whether an expert's GEMMs give the same bits on one thread as on the whole team, at any row
// count: the quantized kernels and Matmul's hand kernels split the work by output columns and sum
// each output in one order; oneDNN (float32/bf16 where the hand kernels do not run) may not.
bool same_bits_on_one_thread(const FfnWeights& w) {
  if (w.w2.scheme != WeightScheme::Plain) return true;
  return Matmul::rows_independent(w.w1.dtype) && Matmul::uses_hand_kernels(w.w1) && Matmul::uses_hand_kernels(w.w2);
}

// A run's cost in rows: its rows, plus what streaming its weights once costs (about 8 rows' work
// in `bench gemm` at decode sizes).
int64_t run_cost(const ExpertRun& r) {
  return r.rows + kSmallMMaxRows;
}

}  // namespace

bool CpuBackend::thread_per_expert(const std::vector<ExpertRun>& runs, int threads) const {
  if (runs.size() < 2 || threads < 2 || omp_in_parallel()) return false;
  int64_t total = 0, largest = 0;
  for (const ExpertRun& r : runs) {
    const FfnWeights& w = static_cast<const CpuExpert&>(*r.expert).w;
    const bool one_thread_ok = same_bits_on_one_thread(w) || (Matmul::uses_small_m(w.w1, r.rows) && Matmul::uses_small_m(w.w2, r.rows));
    if (!one_thread_ok) return false;
    total += run_cost(r);
    largest = std::max(largest, run_cost(r));
  }
  // Whole experts per thread keep every thread busy without a barrier per GEMM (a prefill step's
  // 128 experts of ~8 rows each), as long as no expert is more than a thread's share.
  return largest * threads <= total;
}

void CpuBackend::run_all(const std::vector<ExpertRun>& runs) {
  const int threads = omp_get_max_threads();
  if (!thread_per_expert(runs, threads)) {
    for (const ExpertRun& r : runs) run(r);
    return;
  }
  while (static_cast<int>(threads_.size()) < threads) threads_.push_back({std::make_unique<Matmul>(mm_.hand_kernels()), {}});
  const int64_t d = config_.hidden_size;
  // Largest first, then whoever is free takes the next: the longest-processing-time rule.
  order_.resize(runs.size());
  for (std::size_t i = 0; i < runs.size(); ++i) order_[i] = i;
  std::stable_sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) { return runs[a].rows > runs[b].rows; });
  // Each expert's GEMMs run on one thread (the kernels' own parallel regions are nested, so one
  // thread each): the same arithmetic per output element as run(), so the same bits.
#pragma omp parallel for schedule(dynamic, 1)
  for (std::size_t i = 0; i < runs.size(); ++i) {
    ThreadCompute& t = threads_[static_cast<std::size_t>(omp_get_thread_num())];
    const ExpertRun& r = runs[order_[i]];
    swiglu_ffn_forward(*t.mm, gathered_ + r.offset * d, r.rows, static_cast<const CpuExpert&>(*r.expert).w, results_ + r.offset * d,
                       t.scratch, activation_);
  }
}

std::vector<double> CpuBackend::dense_matmul_seconds(int64_t M, int64_t N, int64_t K, int warmup, int iters) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f / std::sqrt(static_cast<float>(K)));
  std::vector<float> w(static_cast<std::size_t>(N * K)), x(static_cast<std::size_t>(M * K)), y(static_cast<std::size_t>(M * N));
  for (float& v : w) v = dist(rng);
  for (float& v : x) v = dist(rng);
  WeightMatrix W;
  W.allocate(config_.dtype, N, K);
  if (config_.dtype == DType::F32)
    std::copy(w.begin(), w.end(), W.data.as<float>());
  else
    f32_to_bf16(w.data(), W.data.as<uint16_t>(), w.size());
  mm_.pack(W, 1024);
  std::vector<double> out;
  for (int it = 0; it < warmup + iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    mm_.linear(x.data(), M, W, y.data());
    if (it >= warmup) out.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

}  // namespace moerun::experts

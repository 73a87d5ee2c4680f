// One expert-shaped GEMM: Matmul as the model runs it against oneDNN alone, and the read bandwidth.
#include "launch/bench/gemm_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <immintrin.h>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "base/cpu_features.hpp"
#include "base/error.hpp"
#include "base/host.hpp"
#include "base/matmul.hpp"
#include "base/weight_scheme_table.hpp"
#include "base/native_matmul.hpp"
#include "base/native_quant.hpp"
#include "base/quant_matmul.hpp"
#include "base/splitmix64.hpp"
#include "experts/cpu/expert_packing.hpp"

namespace moerun::bench {
namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sums of the matrices' 64-bit words (returned so the reads cannot be dropped), all threads, each
// reading one contiguous stream: with AVX-512 four 64-byte loads per step, else what the compiler
// makes of a loop. The small-M kernels read two streams a thread and can beat it (fraction > 1).
__attribute__((target("avx512f"))) uint64_t sum_words_avx512(const uint64_t* p, int64_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 24));
  }
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t s = 0;
  for (uint64_t v : lanes) s += v;
  for (; i < n; ++i) s += p[i];
  return s;
}

uint64_t sum_words(const uint64_t* p, int64_t n) {
  const bool avx512 = cpu_features().avx512f;
  if (avx512) return sum_words_avx512(p, n);
  uint64_t s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s;
}

// Best seconds of `iters` plain reads over the buffers (all threads, each reading one contiguous stream).
double read_seconds(const std::vector<const AlignedBuffer*>& bufs, int iters) {
  double best = 1e30;
  volatile uint64_t sink = 0;
  for (int it = 0; it < iters; ++it) {
    const double t0 = now();
    uint64_t total = 0;
    for (const AlignedBuffer* b : bufs) {
      const auto* p = static_cast<const uint64_t*>(b->data());
      const int64_t n = static_cast<int64_t>(b->size() / 8);
      uint64_t s = 0;
#pragma omp parallel reduction(+ : s)
      {
        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
        s += sum_words(p + begin, end - begin);
      }
      total += s;
    }
    sink = sink + total;
    best = std::min(best, now() - t0);
  }
  return best;
}

const char* dtype_label(DType t) {
  return t == DType::F32 ? "fp32" : "bf16";
}
const char* row_label(const GemmBenchRow& r) {
  return r.scheme == WeightScheme::Plain ? dtype_label(r.dtype) : weight_scheme_row(r.scheme).name;
}

// As many matrices as take cfg.weight_mb at `bytes_each`, at least 2.
int64_t matrix_count(const GemmBenchConfig& cfg, double bytes_each) {
  return std::max<int64_t>(2, static_cast<int64_t>(static_cast<double>(cfg.weight_mb) * 1e6 / bytes_each));
}

// One matrix's blocked form in a quantized scheme, as the CPU backend packs an expert's.
std::vector<uint8_t> blocked_matrix(WeightScheme sch, const std::vector<float>& plain, int64_t rows, int64_t cols) {
  std::vector<uint8_t> q, out;
  if (is_group_quantized(sch)) {
    out.resize(static_cast<std::size_t>(quant_blocked_bytes(sch, rows, cols)));
    quant_pack_plain(sch, plain.data(), false, rows, cols, out.data());
    return out;
  }
  std::vector<uint8_t> scales;
  if (sch == WeightScheme::Mxfp4) {
    q.resize(static_cast<std::size_t>(rows * cols / 2));
    scales.resize(static_cast<std::size_t>(rows * cols / kMxfp4Block));
    quantize_mxfp4(plain.data(), rows, cols / kMxfp4Block, q.data(), scales.data());
  } else {
    q.resize(static_cast<std::size_t>(rows * cols));
    scales.resize(static_cast<std::size_t>(fp8_scale_rows(rows) * fp8_scale_cols(cols)) * 4);
    quantize_fp8_block(plain.data(), rows, cols, q.data(), reinterpret_cast<float*>(scales.data()));
  }
  out.resize(static_cast<std::size_t>(native_blocked_bytes(sch, rows, cols)));
  native_pack(sch, q.data(), scales.data(), rows, cols, out.data());
  return out;
}

// The quantized rows: the same random matrix quantized and packed as the CPU backend packs an
// expert, timed as the model calls it (q8/q4 with the activations' quantization included; mxfp4 and
// fp8 take float32 activations as they are).
void run_quantized(const GemmBenchConfig& cfg, WeightScheme sch, const std::vector<float>& plain, const std::vector<float>& xf,
                   GemmBenchResult& r) {
  const std::vector<uint8_t> blocked = blocked_matrix(sch, plain, cfg.rows, cfg.cols);
  const double bytes_each = static_cast<double>(blocked.size());
  const int64_t count = matrix_count(cfg, bytes_each);
  std::vector<AlignedBuffer> ws(static_cast<std::size_t>(count));
  for (AlignedBuffer& w : ws) {
    w.resize(blocked.size());
    std::memcpy(w.data(), blocked.data(), blocked.size());
  }
  std::vector<const AlignedBuffer*> bufs;
  for (const AlignedBuffer& w : ws) bufs.push_back(&w);
  r.read_gbps = std::max(r.read_gbps, bytes_each * static_cast<double>(count) / read_seconds(bufs, cfg.iters) * 1e-9);
  std::vector<float> y(static_cast<std::size_t>(*std::max_element(cfg.m.begin(), cfg.m.end()) * cfg.rows));
  QuantizedRows xq;
  for (int64_t M : cfg.m) {
    auto gemm = [&](const AlignedBuffer& w) {
      if (is_native_quantized(sch)) return native_matmul(sch, xf.data(), M, cfg.cols, cfg.rows, w.as<uint8_t>(), y.data());
      quantize_activations(xf.data(), M, cfg.cols, xq);
      quant_matmul(sch, xq, cfg.rows, w.as<uint8_t>(), y.data());
    };
    const double t0 = now();
    gemm(ws[0]);
    const double t1 = now();
    gemm(ws[1]);
    GemmBenchRow row{};
    row.dtype = DType::BF16;
    row.scheme = sch;
    row.m = M;
    row.matrices = count;
    row.kernel = is_native_quantized(sch) ? native_kernel_name(native_kernel_supported(sch, NativeKernel::Avx512) ? NativeKernel::Avx512
                                                                                                                  : NativeKernel::Portable)
                                          : quant_kernel_name(quant_kernel_for(M));
    row.moerun_first_extra_s = std::max(0.0, (t1 - t0) - (now() - t1));
    double best = 1e30;
    for (int it = 0; it < cfg.iters + 1; ++it) {
      const double a = now();
      for (const AlignedBuffer& w : ws) gemm(w);
      if (it > 0) best = std::min(best, now() - a);
    }
    row.moerun_s = best / static_cast<double>(count);
    row.onednn_s = 0;
    for (const GemmBenchRow& b : r.rows)
      if (b.scheme == WeightScheme::Plain && b.dtype == DType::BF16 && b.m == M) row.onednn_s = b.moerun_s;
    const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(cfg.rows * cfg.cols);
    row.weight_gbps = bytes_each / row.moerun_s * 1e-9;
    row.moerun_gflops = flops / row.moerun_s * 1e-9;
    row.onednn_gflops = row.onednn_s > 0 ? flops / row.onednn_s * 1e-9 : 0;
    row.speedup = row.onednn_s > 0 ? row.onednn_s / row.moerun_s : 0;
    r.rows.push_back(row);
  }
}

}  // namespace

void GemmBenchConfig::validate() const {
  if (rows < 1 || cols < 1) fail(ErrorKind::Usage, "--rows and --cols must be >= 1");
  if (weight_mb < 1) fail(ErrorKind::Usage, "--weight-mb must be >= 1");
  if (iters < 1) fail(ErrorKind::Usage, "--iters must be >= 1");
  if (m.empty() || (dtypes.empty() && schemes.empty())) fail(ErrorKind::Usage, "--m and --dtype need at least one value");
  if (!schemes.empty() && cols % kQuantGroup != 0)
    fail(ErrorKind::Usage, "--cols must be a multiple of 32 for q8, q4, int4, mxfp4 and fp8");
  for (int64_t v : m)
    if (v < 1 || v > 4096) fail(ErrorKind::Usage, "--m: ", v, " is not in [1, 4096]");
  const int64_t host_mb = host_memory_bytes() / 1000000;
  if (host_mb > 0 && weight_mb > host_mb / 2)
    fail(ErrorKind::Usage, "--weight-mb ", weight_mb, " is more than half of this host's memory (", host_mb, " MB)");
}

GemmBenchResult run_gemm_bench(const GemmBenchConfig& cfg) {
  cfg.validate();
  GemmBenchResult r;
  const int64_t maxm = *std::max_element(cfg.m.begin(), cfg.m.end());
  for (DType dt : cfg.dtypes) {
    Matmul ours(true), onednn(false);
    const double bytes_each = static_cast<double>(cfg.rows * cfg.cols) * static_cast<double>(dtype_size(dt));
    const int64_t count = matrix_count(cfg, bytes_each);
    std::vector<WeightMatrix> ws(static_cast<std::size_t>(count));
    uint64_t state = 7;
    auto uniform = [&] {  // [0, 1)
      state += kSplitmix64Gamma;
      return static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53);
    };
    // One random matrix, copied into each (their values do not change the timing).
    std::vector<float> plain(static_cast<std::size_t>(cfg.rows * cfg.cols));
    for (float& v : plain) v = uniform() * 0.02f - 0.01f;
    for (WeightMatrix& w : ws) {
      w.allocate(dt, cfg.rows, cfg.cols);
      if (dt == DType::F32)
        std::memcpy(w.data.data(), plain.data(), w.bytes());
      else
        f32_to_bf16(plain.data(), w.data.as<uint16_t>(), plain.size());
      ours.pack(w, kFfnTypicalRows);  // as the CPU backend packs an expert
    }
    // x in W's dtype with room for the padded rows, so neither side copies rows to pad them.
    const int64_t cap = Matmul::padded_rows(maxm);
    std::vector<float> xf(static_cast<std::size_t>(cap * cfg.cols));
    for (float& v : xf) v = uniform() - 0.5f;
    std::vector<uint16_t> xb(xf.size());
    f32_to_bf16(xf.data(), xb.data(), xf.size());
    const void* x = dt == DType::F32 ? static_cast<const void*>(xf.data()) : xb.data();
    std::vector<float> y(static_cast<std::size_t>(cap * cfg.rows));
    std::vector<const AlignedBuffer*> bufs;
    for (const WeightMatrix& w : ws) bufs.push_back(&w.data);
    r.read_gbps = std::max(r.read_gbps, bytes_each * static_cast<double>(count) / read_seconds(bufs, cfg.iters) * 1e-9);
    for (int64_t M : cfg.m) {
      auto gemm = [&](Matmul& mm, const WeightMatrix& w) { mm.gemm(x, M, w, y.data(), DType::F32, Epilogue::None, nullptr, cap); };
      // The first call at this M against the next, each on a matrix the last pass left out of cache.
      auto first_extra = [&](Matmul& mm) {
        const double t0 = now();
        gemm(mm, ws[0]);
        const double t1 = now();
        gemm(mm, ws[1]);
        return std::max(0.0, (t1 - t0) - (now() - t1));
      };
      // Per matrix, the best of the passes after the first.
      auto pass = [&](Matmul& mm) {
        double best = 1e30;
        for (int it = 0; it < cfg.iters + 1; ++it) {
          const double t0 = now();
          for (const WeightMatrix& w : ws) gemm(mm, w);
          if (it > 0) best = std::min(best, now() - t0);
        }
        return best / static_cast<double>(count);
      };
      GemmBenchRow row;
      row.dtype = dt;
      row.m = M;
      row.matrices = count;
      row.kernel = Matmul::uses_small_m(ws[0], M) ? "small-m" : Matmul::uses_panel(ws[0], M) ? "panel" : "oneDNN";
      row.onednn_first_extra_s = first_extra(onednn);
      row.moerun_first_extra_s = first_extra(ours);
      row.moerun_s = pass(ours);
      row.onednn_s = pass(onednn);
      const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(cfg.rows * cfg.cols);
      row.weight_gbps = bytes_each / row.moerun_s * 1e-9;
      row.moerun_gflops = flops / row.moerun_s * 1e-9;
      row.onednn_gflops = flops / row.onednn_s * 1e-9;
      row.speedup = row.onednn_s / row.moerun_s;
      r.rows.push_back(row);
    }
  }
  if (!cfg.schemes.empty()) {
    uint64_t state = 7;
    auto uniform = [&] {
      state += kSplitmix64Gamma;
      return static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53);
    };
    std::vector<float> plain(static_cast<std::size_t>(cfg.rows * cfg.cols)), xf(static_cast<std::size_t>(maxm * cfg.cols));
    for (float& v : plain) v = uniform() * 0.02f - 0.01f;
    for (float& v : xf) v = uniform() - 0.5f;
    for (WeightScheme sch : cfg.schemes) run_quantized(cfg, sch, plain, xf, r);
  }
  return r;
}

std::string gemm_bench_table(const GemmBenchConfig& cfg, const GemmBenchResult& r) {
  std::string s = str("# moerun bench gemm: W ", cfg.rows, "x", cfg.cols, " packed as an expert, ", cfg.weight_mb,
                      " MB of such matrices per dtype (streamed from memory); isa ", Matmul::isa_name(), ", ", omp_get_max_threads(),
                      " threads, best of ", cfg.iters, " passes after a first\n");
  char buf[256];
  std::snprintf(buf, sizeof buf, "# read bandwidth over the same matrices: %.1f GB/s\n", r.read_gbps);
  s += buf;
  std::snprintf(buf, sizeof buf, "#%6s %5s %8s %11s %9s %7s %9s %11s %9s %8s %9s %9s\n", "dtype", "M", "kernel", "moerun(ms)", "weights",
                "of", "moerun", "oneDNN(ms)", "oneDNN", "speedup", "new M", "new M");
  s += buf;
  std::snprintf(buf, sizeof buf, "#%6s %5s %8s %11s %9s %7s %9s %11s %9s %8s %9s %9s\n", "", "", "", "", "(GB/s)", "read", "(GFLOP/s)", "",
                "(GFLOP/s)", "", "+ms ours", "+ms 1DNN");
  s += buf;
  bool pass = true, any = false, qpass = true, qany = false;
  for (const auto& row : r.rows) {
    char ours_new[16] = "-";
    if (row.kernel != "oneDNN") std::snprintf(ours_new, sizeof ours_new, "%.2f", row.moerun_first_extra_s * 1e3);
    std::snprintf(buf, sizeof buf, " %6s %5lld %8s %11.3f %9.1f %7.2f %9.1f %11.3f %9.1f %8.2f %9s %9.2f\n", row_label(row),
                  static_cast<long long>(row.m), row.kernel.c_str(), row.moerun_s * 1e3, row.weight_gbps, row.weight_gbps / r.read_gbps,
                  row.moerun_gflops, row.onednn_s * 1e3, row.onednn_gflops, row.speedup, ours_new, row.onednn_first_extra_s * 1e3);
    s += buf;
    if (row.m == 1 && row.scheme == WeightScheme::Plain) {
      any = true;
      if (row.weight_gbps < 0.7 * r.read_gbps) pass = false;
    } else if (row.m == 1) {
      qany = true;
      if (row.weight_gbps < 0.8 * r.read_gbps) qpass = false;
    }
  }
  s += "# new M: how much longer the first call at a new M takes than the next (oneDNN creates its primitive then;\n"
       "# moerun's only where its own kernel runs)\n";
  if (qany)
    s += "# q8/q4/mxfp4/fp8 rows: weights in their packed bytes; the oneDNN columns hold moerun's bf16 row at the same M,\n"
         "# speedup its time over theirs (q8/q4: activation quantization included)\n";
  if (any)
    s += str("# verdict: weights stream at ", pass ? ">= " : "< ", "0.7 of the read bandwidth at M = 1",
             pass ? " for every dtype: PASS" : ": BELOW TARGET", "\n");
  if (qany)
    s += str("# verdict: quantized weights stream at ", qpass ? ">= " : "< ", "0.8 of the read bandwidth at M = 1 in packed bytes",
             qpass ? ": PASS" : ": BELOW TARGET", "\n");
  return s;
}

std::string gemm_bench_json(const GemmBenchConfig& cfg, const GemmBenchResult& r) {
  nlohmann::json j;
  j["rows"] = cfg.rows;
  j["cols"] = cfg.cols;
  j["weight_mb"] = cfg.weight_mb;
  j["isa"] = Matmul::isa_name();
  j["threads"] = omp_get_max_threads();
  j["read_gbps"] = r.read_gbps;
  j["results"] = nlohmann::json::array();
  for (const auto& row : r.rows)
    j["results"].push_back({{"dtype", row_label(row)},
                            {"m", row.m},
                            {"kernel", row.kernel},
                            {"matrices", row.matrices},
                            {"moerun_first_extra_s", row.moerun_first_extra_s},
                            {"onednn_first_extra_s", row.onednn_first_extra_s},
                            {"moerun_s", row.moerun_s},
                            {"onednn_s", row.onednn_s},
                            {"weight_gbps", row.weight_gbps},
                            {"fraction_of_read", row.weight_gbps / r.read_gbps},
                            {"moerun_gflops", row.moerun_gflops},
                            {"onednn_gflops", row.onednn_gflops},
                            {"speedup", row.speedup}});
  return j.dump(2);
}

}  // namespace moerun::bench

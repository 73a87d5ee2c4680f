// The CUDA expert backend (see cuda_backend.hpp).
#include "experts/cuda/cuda_backend.hpp"

#include <cstdio>
#include <cstring>
#include <mutex>

#include "base/cuda_check.hpp"
#include "base/cuda_device.hpp"
#include "base/cuda_handles.hpp"
#include "base/error.hpp"
#include "experts/backend_abi_export.hpp"
#include "experts/cuda/cuda_kernels.cuh"

namespace moerun::experts {
namespace {

struct CublasTraits {
  using Type = cublasHandle_t;
  static void destroy(cublasHandle_t h) { (void)cublasDestroy(h); }
};
using Cublas = moerun::cuda::Handle<CublasTraits>;

Cublas make_cublas(cudaStream_t stream) {
  cublasHandle_t h = nullptr;
  CUBLAS_CHECK(cublasCreate(&h));
  Cublas handle(h);
  CUBLAS_CHECK(cublasSetStream(h, stream));
  return handle;
}

cudaDataType cuda_type(DType t) {
  return t == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// y[M, N] (fp32, row-major) = x[M, K] · W[N, K]ᵀ, both row-major in `t`. In cuBLAS's column-major
// terms that is yᵀ[N, M] = W[N, K] (stored as Wᵀ, hence OP_T) · xᵀ[K, M].
void linear(cublasHandle_t h, const void* x, int64_t M, const void* W, int64_t N, int64_t K, DType t, float* y) {
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &one, W,
                            cuda_type(t), static_cast<int>(K), x, cuda_type(t), static_cast<int>(K), &zero, y, CUDA_R_32F,
                            static_cast<int>(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}
constexpr std::size_t kCudaMallocAlign = 256;  // cudaMalloc's documented alignment

// Where the parts of an expert's raw form are (io::expert_raw_parts, which this library does not
// link, in its byte arithmetic base/weight_dequant): w1, w3, w2 (and their scales when quantized),
// then b1‖b3‖b2 in the model's dtype.
struct RawLayout {
  std::size_t values[3] = {}, scales[3] = {}, bias = 0, bytes = 0;
};
RawLayout raw_layout(const model::ModelConfig& c) {
  const WeightScheme s = c.expert_format.scheme;
  const int64_t ff = c.intermediate_size, d = c.hidden_size;
  const std::size_t es = dtype_size(c.dtype);
  RawLayout l;
  std::size_t at = 0;
  for (int m = 0; m < 3; ++m) {
    const int64_t rows = m == 2 ? d : ff, cols = m == 2 ? ff : d;
    l.values[m] = at;
    at += s == WeightScheme::Plain ? static_cast<std::size_t>(rows * cols) * es
                                   : static_cast<std::size_t>(dequant::values_bytes(s, rows, cols));
    l.scales[m] = at;
    at += static_cast<std::size_t>(dequant::scales_bytes(s, rows, cols));
  }
  l.bias = at;
  l.bytes = at + static_cast<std::size_t>(c.expert_bias_params()) * es;
  return l;
}

class CudaExpert final : public ResidentExpert {
 public:
  cuda::DeviceBuffer weights;  // the raw form as stored (RawLayout): plain matrices row-major, or quantized bytes
  cuda::Event last_use;  // recorded on the compute stream after the GEMMs that read them
  BufferInfo buffer() const override { return {MemoryKind::Device, weights.bytes(), round_up(weights.bytes(), kCudaMallocAlign)}; }
};

// A loader thread's pinned staging buffer and copy stream (per thread: the cache's I/O threads load
// concurrently).
struct LoadStaging {
  int device = -1;
  cuda::PinnedBuffer pinned;
  cuda::Stream stream;
};

class CudaBackend final : public ExpertBackend, public BackendTiming {
 public:
  CudaBackend(const model::ModelConfig& c, int local_rank)
      : config_(c),
        layout_(raw_layout(c)),
        quantized_(c.expert_format.scheme != WeightScheme::Plain),
        compute_(quantized_ ? DType::F32 : c.dtype) {
    device_ = use_cuda_device(local_rank, "--device cuda");
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
    name_ = prop.name;
    memory_ = static_cast<int64_t>(prop.totalGlobalMem);
    stream_ = cuda::make_stream();
    cublas_ = make_cublas(stream_.get());
    for (cuda::Event* e : {&in_start_, &in_end_, &out_start_, &out_end_}) *e = cuda::make_event(true);
    if (c.dtype != DType::F32 && c.dtype != DType::BF16) fail(ErrorKind::Usage, "--device cuda: experts must be float32 or bfloat16");
  }
  ~CudaBackend() override {
    if (stream_) (void)cudaStreamSynchronize(stream_.get());
  }

  std::string describe() const override {
    return str("cuda (device ", device_, ": ", name_, ", ", memory_ >> 30, " GiB, cuBLAS",
               quantized_ ? ", quantized experts dequantized to float32" : "", ")");
  }
  MemoryKind weight_memory() const override { return MemoryKind::Device; }
  int64_t expert_bytes() override { return static_cast<int64_t>(round_up(raw_bytes(), kCudaMallocAlign)); }
  int64_t memory_bytes() override {
    CUDA_CHECK(cudaSetDevice(device_));
    std::size_t free = 0, total = 0;
    CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return static_cast<int64_t>(free);
  }
  model::WeightFormat weight_format() const override { return config_.expert_format; }
  BackendTiming* timing() override { return this; }

  std::unique_ptr<ResidentExpert> allocate_expert() override {
    CUDA_CHECK(cudaSetDevice(device_));
    auto e = std::make_unique<CudaExpert>();
    e->weights.resize(raw_bytes());
    e->last_use = cuda::make_event();
    return e;
  }

  void load_expert(const void* raw, ResidentExpert& into) override {
    CUDA_CHECK(cudaSetDevice(device_));
    thread_local LoadStaging staging;
    if (staging.device != device_) {
      staging.stream = cuda::make_stream();
      staging.device = device_;
    }
    const std::size_t bytes = raw_bytes();
    staging.pinned.resize(bytes);
    std::memcpy(staging.pinned.get(), raw, bytes);
    auto& e = static_cast<CudaExpert&>(into);
    // The slot's old weights may still be read by an enqueued GEMM: the copy waits for it.
    CUDA_CHECK(cudaStreamWaitEvent(staging.stream.get(), e.last_use.get(), 0));
    CUDA_CHECK(cudaMemcpyAsync(e.weights.get(), staging.pinned.get(), bytes, cudaMemcpyHostToDevice, staging.stream.get()));
    CUDA_CHECK(cudaStreamSynchronize(staging.stream.get()));
  }

  void begin(const float* gathered, int64_t rows, float* results) override {
    CUDA_CHECK(cudaSetDevice(device_));
    const int64_t d = config_.hidden_size, ff = config_.intermediate_size;
    rows_ = rows;
    results_ = results;
    const std::size_t n = static_cast<std::size_t>(std::max<int64_t>(rows, 1));
    x_.resize(n * d * 4);
    y_.resize(n * d * 4);
    g_.resize(n * ff * 4);
    u_.resize(n * ff * 4);
    act_.resize(n * ff * dtype_size(compute_));
    if (compute_ == DType::BF16) xb_.resize(n * d * 2);
    if (rows == 0) return;
    CUDA_CHECK(cudaEventRecord(in_start_.get(), stream_.get()));
    CUDA_CHECK(cudaMemcpyAsync(x_.get(), gathered, static_cast<std::size_t>(rows * d) * 4, cudaMemcpyHostToDevice, stream_.get()));
    CUDA_CHECK(cudaEventRecord(in_end_.get(), stream_.get()));
    if (compute_ == DType::BF16) kernels::f32_to_bf16(x_.as<float>(), xb_.as<uint16_t>(), rows * d, stream_.get());
  }

  RowBuffers row_buffers(int64_t rows) override {
    const std::size_t bytes = static_cast<std::size_t>(std::max<int64_t>(rows, 1) * config_.hidden_size) * 4;
    if (bytes > rows_in_.bytes()) CUDA_CHECK(cudaStreamSynchronize(stream_.get()));  // no copy reads the old ones
    rows_in_.resize(bytes);
    rows_out_.resize(bytes);
    return {rows_in_.as<float>(), rows_out_.as<float>()};
  }

  void run(const ExpertRun& r) override {
    if (r.rows == 0) return;
    const int64_t d = config_.hidden_size, ff = config_.intermediate_size;
    const DType t = compute_;
    const std::size_t es = dtype_size(t);
    const auto& e = static_cast<const CudaExpert&>(*r.expert);
    const void* w[3];
    matrices(e, w);
    const char* x = t == DType::BF16 ? xb_.as<const char>() : x_.as<const char>();
    x += static_cast<std::size_t>(r.offset * d) * es;
    // G = x·W1ᵀ, U = x·W3ᵀ (fp32), A = silu(G) ⊙ U (rounded to the weights' dtype, as the CPU FFN
    // stores it), Y = A·W2ᵀ into this expert's rows. gpt-oss: the biases and the clamped form.
    linear(cublas_.get(), x, r.rows, w[0], ff, d, t, g_.as<float>());
    linear(cublas_.get(), x, r.rows, w[1], ff, d, t, u_.as<float>());
    float* y = y_.as<float>() + r.offset * d;
    const char* bias = e.weights.as<const char>() + layout_.bias;  // b1‖b3‖b2 in the model's dtype
    const std::size_t bias_es = dtype_size(config_.dtype);
    if (config_.expert_bias || config_.expert_activation == model::ExpertActivation::ClampedSwiGlu) {
      kernels::GatedActivation a;
      if (config_.expert_bias) {
        a.b1 = bias;
        a.b3 = bias + static_cast<std::size_t>(ff) * bias_es;
      }
      a.bias_bf16 = config_.dtype == DType::BF16;
      a.clamped = config_.expert_activation == model::ExpertActivation::ClampedSwiGlu;
      a.alpha = static_cast<float>(config_.swiglu_alpha);
      a.limit = static_cast<float>(config_.swiglu_limit);
      kernels::gated_activation(g_.as<float>(), u_.as<float>(), a, act_.get(), t == DType::BF16, r.rows, ff, stream_.get());
    } else {
      kernels::silu_mul(g_.as<float>(), u_.as<float>(), act_.get(), t == DType::BF16, r.rows * ff, stream_.get());
    }
    linear(cublas_.get(), act_.get(), r.rows, w[2], d, ff, t, y);
    if (config_.expert_bias)
      kernels::add_row_bias(y, bias + static_cast<std::size_t>(2 * ff) * bias_es, config_.dtype == DType::BF16, r.rows, d, stream_.get());
    CUDA_CHECK(cudaEventRecord(e.last_use.get(), stream_.get()));
  }

  std::vector<double> dense_matmul_seconds(int64_t M, int64_t N, int64_t K, int warmup, int iters) override;

  void finish() override {
    if (rows_ > 0) {
      CUDA_CHECK(cudaEventRecord(out_start_.get(), stream_.get()));
      CUDA_CHECK(cudaMemcpyAsync(results_, y_.get(), static_cast<std::size_t>(rows_ * config_.hidden_size) * 4, cudaMemcpyDeviceToHost,
                                 stream_.get()));
      CUDA_CHECK(cudaEventRecord(out_end_.get(), stream_.get()));
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    if (rows_ > 0) {
      float in_ms = 0, out_ms = 0;
      CUDA_CHECK(cudaEventElapsedTime(&in_ms, in_start_.get(), in_end_.get()));
      CUDA_CHECK(cudaEventElapsedTime(&out_ms, out_start_.get(), out_end_.get()));
      copy_s_ += (in_ms + out_ms) * 1e-3;
    }
  }
  double copy_seconds() const override { return copy_s_; }

 private:
  std::size_t raw_bytes() const { return layout_.bytes; }

  // The expert's w1, w3, w2 as the GEMMs take them: its own memory (plain), or dequantized to
  // float32 into the backend's scratch on the compute stream (quantized: one matrix at a time is
  // all cuBLAS needs, and the stream orders the next expert's dequantization after these GEMMs).
  void matrices(const CudaExpert& e, const void* w[3]) {
    const int64_t d = config_.hidden_size, ff = config_.intermediate_size;
    const auto* base = e.weights.as<const uint8_t>();
    for (int m = 0; m < 3; ++m) {
      if (!quantized_) {
        w[m] = base + layout_.values[m];
        continue;
      }
      const int64_t rows = m == 2 ? d : ff, cols = m == 2 ? ff : d;
      dequantized_[m].resize(static_cast<std::size_t>(rows * cols) * 4);
      kernels::dequantize({config_.expert_format.scheme, base + layout_.values[m], base + layout_.scales[m], rows, cols},
                          dequantized_[m].as<float>(), stream_.get());
      w[m] = dequantized_[m].get();
    }
  }

  model::ModelConfig config_;
  RawLayout layout_;
  bool quantized_ = false;
  DType compute_ = DType::F32;  // the GEMMs' operand type: the model's dtype, float32 for quantized experts
  cuda::DeviceBuffer dequantized_[3];  // quantized experts: w1, w3, w2 as float32
  int device_ = 0;
  std::string name_;
  int64_t memory_ = 0;
  cuda::Stream stream_;
  Cublas cublas_;
  // Per-layer device scratch, grown to the largest block seen.
  cuda::DeviceBuffer x_, xb_, g_, u_, act_, y_;
  cuda::PinnedBuffer rows_in_, rows_out_;  // row_buffers(): page-locked, so the copies run at full speed
  int64_t rows_ = 0;
  float* results_ = nullptr;
  cuda::Event in_start_, in_end_, out_start_, out_end_;  // around the row copies (timing)
  double copy_s_ = 0;
};

}  // namespace

std::unique_ptr<ExpertBackend> make_cuda_backend(const model::ModelConfig& config, int local_rank) {
  return std::make_unique<CudaBackend>(config, local_rank);
}

}  // namespace moerun::experts

// The C interface the library exports (experts/backend_abi_export.hpp does the wrapping).
extern "C" moerun_backend* moerun_cuda_backend_open_v1(const moerun_backend_model* model, moerun_backend_ops* ops,
                                                       moerun_backend_error* err) {
  return moerun::experts::export_backend(model, ops, err, [](const moerun::model::ModelConfig& c, int local_rank) {
    return moerun::experts::make_cuda_backend(c, local_rank);
  });
}

namespace moerun::experts {
namespace {

std::vector<double> CudaBackend::dense_matmul_seconds(int64_t M, int64_t N, int64_t K, int warmup, int iters) {
  CUDA_CHECK(cudaSetDevice(device_));
  const DType dt = config_.dtype;
  const std::size_t es = dtype_size(dt);
  cuda::DeviceBuffer x(static_cast<std::size_t>(M * K) * es), w(static_cast<std::size_t>(N * K) * es),
      y(static_cast<std::size_t>(M * N) * 4);
  // Values do not change a GEMM's speed; zeros avoid denormal or NaN surprises.
  CUDA_CHECK(cudaMemset(x.get(), 0, x.bytes()));
  CUDA_CHECK(cudaMemset(w.get(), 0, w.bytes()));
  cuda::Stream stream = cuda::make_stream();
  Cublas h = make_cublas(stream.get());
  cuda::Event start = cuda::make_event(true), stop = cuda::make_event(true);
  std::vector<double> out;
  // Its own stream: the operands and this timing do not touch the expert path's state.
  for (int it = 0; it < warmup + iters; ++it) {
    CUDA_CHECK(cudaEventRecord(start.get(), stream.get()));
    linear(h.get(), x.get(), M, w.get(), N, K, dt, y.as<float>());
    CUDA_CHECK(cudaEventRecord(stop.get(), stream.get()));
    CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    if (it >= warmup) out.push_back(ms * 1e-3);
  }
  return out;
}

}  // namespace
}  // namespace moerun::experts

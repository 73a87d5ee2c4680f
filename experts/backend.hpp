// ExpertBackend: where an expert rank keeps its experts' weights and how it computes their FFNs, the
// seam between the experts and everything above them (like ggml's backends and buffer types, cut to
// what MoE experts need). io/ hands over raw bytes only (w1‖w3‖w2 as stored, verified); a backend
// turns them into its resident form. The CPU backend (experts/cpu) is oneDNN on host memory; the
// CUDA backend (experts/cuda) keeps experts in device memory and runs cuBLAS.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/matmul.hpp"
#include "base/memory_kind.hpp"
#include "io/blob_store.hpp"
#include "model/model_config.hpp"
#include "model/weight_format.hpp"

namespace moerun::experts {

enum class DeviceKind { Cpu, Cuda };
DeviceKind parse_device(const std::string& s);  // ConfigError naming the field "device"
const char* device_name(DeviceKind d);

// Which backend, and where its library is (launch/ reads MOERUN_CUDA_BACKEND into it).
struct BackendSpec {
  DeviceKind device = DeviceKind::Cpu;
  std::string cuda_library;  // libmoerun_cuda.so; empty: next to the running executable
  std::shared_ptr<HugePagePool> host_weights;  // where the CPU backend keeps experts (null: the C heap)
};

// One allocation of a backend: where it lives, the bytes asked for, the bytes really taken.
struct BufferInfo {
  MemoryKind kind = MemoryKind::Host;
  std::size_t bytes = 0;
  std::size_t allocated = 0;
};

// One expert's weights in the form its backend computes with. Allocated once (an L1 slot, or a
// resident expert) and reloaded in place by ExpertBackend::load_expert.
class ResidentExpert {
 public:
  virtual ~ResidentExpert() = default;
  virtual BufferInfo buffer() const = 0;
};

// The form the L2 tier keeps of a backend's experts when their resident form is in host memory:
// L2 writes it and reads hits straight back into a slot. A backend without one (its experts live
// in device memory) has L2 keep the raw form, verified again on the way back.
class StoredForm {
 public:
  virtual ~StoredForm() = default;
  // A stored form of another name (another layout, ISA or weight format) is not read back.
  virtual std::string name() const = 0;
  // The host memory of `e` that holds this form, in parts (w1, w3, w2).
  virtual std::vector<io::BlobPart> parts(ResidentExpert& e) const = 0;
  // The NaN/Inf scan of `e` just read back into this form (BadInput naming `where` and `group`): a
  // packed form has the same numbers plus zero padding, so the scan still finds any, e.g. in an
  // L2 written before loads were scanned.
  virtual void check_finite(ResidentExpert& e, const std::string& where, const std::string& group) const = 0;
};

// What `bench layer` times a backend by: its own dense GEMM, and its host-device copies.
class BackendTiming {
 public:
  virtual ~BackendTiming() = default;
  // Seconds per dense y[M, N] = x[M, K]·W[N, K]ᵀ in the model's dtype on the backend's own GEMM
  // (oneDNN, cuBLAS), operands already in its memory; one entry per timed iteration.
  virtual std::vector<double> dense_matmul_seconds(int64_t M, int64_t N, int64_t K, int warmup, int iters) = 0;
  // Seconds spent so far moving rows between host and device memory inside begin()/finish().
  virtual double copy_seconds() const { return 0; }
};

// Host memory for a layer's rows, of the kind this backend copies from fastest (pinned for a GPU).
struct RowBuffers {
  float* gathered = nullptr;  // [rows, d]: callers gather the rows here, then begin()
  float* results = nullptr;  // [rows, d]: the experts' outputs after finish()
};

// The rows of one expert within a layer's block of gathered rows.
struct ExpertRun {
  const ResidentExpert* expert = nullptr;
  int64_t offset = 0;  // first row
  int64_t rows = 0;
};

class ExpertBackend {
 public:
  virtual ~ExpertBackend() = default;
  virtual std::string describe() const = 0;  // one line for logs and bench output
  // The experts' weight format this backend computes with (the model's, model/weight_format.hpp).
  virtual model::WeightFormat weight_format() const = 0;
  virtual MemoryKind weight_memory() const = 0;
  // Real bytes one expert of the model takes in this backend's memory: what an L1 slot costs.
  virtual int64_t expert_bytes() = 0;
  // Bytes this backend's weight memory can still take (host: physical memory; device: free memory
  // now); 0 when unknown. Checked before allocating, so too many experts are a clear error.
  virtual int64_t memory_bytes() = 0;
  // The form L2 keeps (null: the raw form) and the timing `bench layer` uses (null: none).
  virtual const StoredForm* stored_form() const { return nullptr; }
  virtual BackendTiming* timing() { return nullptr; }

  virtual std::unique_ptr<ResidentExpert> allocate_expert() = 0;
  // Loads raw (verified) bytes into `into`. Thread-safe: the cache's I/O threads call it while the
  // compute thread runs other experts. Returns when `into` may be computed with and `raw` reused;
  // waits first for any compute still reading `into`'s old weights.
  virtual void load_expert(const void* raw, ResidentExpert& into) = 0;

  // A layer's expert FFNs, grouped: begin() with the gathered rows (host float32 [rows, d]), run()
  // each expert's rows in any order, finish() leaves every expert's output in `results` (host
  // float32 [rows, d]). One compute thread. After run() returns, the caller may release the
  // expert to its store: a backend that computes asynchronously guards the weights itself
  // (load_expert waits for the compute that reads them).
  virtual void begin(const float* gathered, int64_t rows, float* results) = 0;
  // Buffers for `rows` rows owned by the backend (grown, never shrunk; valid until the next call).
  // Any host memory works for begin(); these save a GPU backend a staging copy each way.
  virtual RowBuffers row_buffers(int64_t rows) = 0;
  virtual void run(const ExpertRun& r) = 0;
  // Several experts' runs at once, every expert acquired until it returns (a backend may compute
  // them concurrently); the same results as run() on each.
  virtual void run_all(const std::vector<ExpertRun>& runs) {
    for (const ExpertRun& r : runs) run(r);
  }
  virtual void finish() = 0;
};

// The name of the form L2 keeps for `backend`'s experts of `config`.
std::string stored_form_name(const ExpertBackend& backend, const model::ModelConfig& config);

// Rows at whose multiples an expert's rows may be split between replicas with the same bits as
// computed whole (experts/replica_split): 1 where the kernels are row-independent (the CPU's q8, q4,
// mxfp4 and fp8 kernels, and float32 and bf16 where the CPU runs Matmul's hand kernels: AVX-512F,
// AVX512_BF16), else Matmul::kRowChunk for bf16 through oneDNN (its GEMMs run in chunks of that many
// rows) and 0 (never split) for float32 through oneDNN, bf16 widened to float32 (Matmul::bf16_widened)
// and the CUDA backend (cuBLAS picks its algorithm by row count).
int64_t replica_row_granule(const model::ModelConfig& config, DeviceKind device);

// The backend of `spec` for the experts of `config`. `compute` is the compute thread's oneDNN
// context (CPU backend); a CUDA backend needs a build with CUDA and a visible device (Usage error
// otherwise). `local_rank` (the rank's index on its host) picks the GPU: local_rank mod visible
// devices. A weight format the backend has no kernels for is a Usage error naming both.
std::unique_ptr<ExpertBackend> make_expert_backend(const BackendSpec& spec, const model::ModelConfig& config, Matmul& compute,
                                                   int local_rank = 0);

}  // namespace moerun::experts

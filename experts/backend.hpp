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
#include "io/model_config.hpp"

namespace moerun::experts {

enum class DeviceKind { Cpu, Cuda };
DeviceKind parse_device(const std::string& s);  // Usage error naming --device
const char* device_name(DeviceKind d);

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
  // Host memory holding the backend's packed form, in parts (w1, w3, w2) that the L2 tier keeps and
  // reads back in place; empty when the resident form is not in host memory (L2 keeps the raw form).
  virtual std::vector<io::BlobPart> host_parts() { return {}; }
};

// Host memory for a layer's rows, of the kind this backend copies from fastest (pinned for a GPU).
struct RowBuffers {
  float* gathered = nullptr;  // [rows, d]: callers gather the rows here, then begin()
  float* results = nullptr;   // [rows, d]: the experts' outputs after finish()
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
  virtual MemoryKind weight_memory() const = 0;
  // Real bytes one expert of the model takes in this backend's memory: what an L1 slot costs.
  virtual int64_t expert_bytes() = 0;
  // Bytes this backend's weight memory can still take (host: physical memory; device: free memory
  // now); 0 when unknown. Checked before allocating, so too many experts are a clear error.
  virtual int64_t memory_bytes() = 0;
  // Name of the form L2 keeps for this backend; a stored form of another name is not read back.
  virtual std::string stored_form_name() = 0;
  // True when experts' host_parts() are the stored form (L2 then reads hits straight into them).
  virtual bool packs_on_host() const = 0;

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
  virtual void finish() = 0;

  // Seconds per dense y[M, N] = x[M, K]·W[N, K]ᵀ in the model's dtype on this backend's own GEMM
  // (oneDNN, cuBLAS), operands already in its memory; one entry per timed iteration. The peak that
  // `bench layer` holds the MoE layer against.
  virtual std::vector<double> dense_matmul_seconds(int64_t M, int64_t N, int64_t K, int warmup, int iters) = 0;
  // Seconds spent so far moving rows between host and device memory inside begin()/finish() (a
  // backend computing in host memory moves none).
  virtual double copy_seconds() const { return 0; }
};

// The backend for --device. `compute` is the compute thread's oneDNN context (CPU backend); a CUDA
// backend needs a build with CUDA and a visible device (Usage error otherwise).
// `local_rank` (the rank's index on its host) picks the GPU: local_rank mod visible devices.
std::unique_ptr<ExpertBackend> make_expert_backend(DeviceKind device, const io::ModelConfig& config, Matmul& compute,
                                                   int local_rank = 0);

}  // namespace moerun::experts

// The C-interface backend adapter.
#include "experts/c_backend.hpp"

#include <cstring>

#include "base/error.hpp"

namespace moerun::experts {
namespace {

// The library's error as moerun::Error of its kind (an unknown code counts as internal).
[[noreturn]] void throw_library_error(int code, moerun_backend_error& err, const std::string& library, const char* fallback) {
  err.message[sizeof err.message - 1] = '\0';
  const int kind = code >= 1 && code <= 5 ? code : 1;
  throw Error(static_cast<ErrorKind>(kind), err.message[0] ? std::string(err.message) : str(library, ": ", fallback));
}

class CExpert final : public ResidentExpert {
 public:
  CExpert(moerun_backend* b, const moerun_backend_ops& ops, moerun_expert* e) : b_(b), ops_(ops), e_(e) {}
  ~CExpert() override { ops_.free_expert(b_, e_); }
  BufferInfo buffer() const override {
    moerun_buffer_info i{};
    ops_.expert_buffer(b_, e_, &i);
    return {static_cast<MemoryKind>(i.memory_kind), static_cast<std::size_t>(i.bytes), static_cast<std::size_t>(i.allocated)};
  }
  moerun_expert* handle() const { return e_; }

 private:
  moerun_backend* b_;
  const moerun_backend_ops& ops_;
  moerun_expert* e_;
};

class CBackend final : public ExpertBackend, public BackendTiming {
 public:
  CBackend(moerun_backend* b, const moerun_backend_ops& ops, std::string library, model::WeightFormat format)
      : b_(b), ops_(ops), library_(std::move(library)), format_(format) {}
  ~CBackend() override { ops_.destroy(b_); }

  std::string describe() const override {
    char buf[512] = {};
    moerun_backend_error err{};
    if (ops_.describe(b_, buf, sizeof buf, &err) != MOERUN_BACKEND_OK) return library_;
    return buf;
  }
  model::WeightFormat weight_format() const override { return format_; }
  MemoryKind weight_memory() const override { return static_cast<MemoryKind>(ops_.weight_memory(b_)); }
  int64_t expert_bytes() override { return value(ops_.expert_bytes); }
  int64_t memory_bytes() override { return value(ops_.memory_bytes); }
  BackendTiming* timing() override { return this; }

  std::unique_ptr<ResidentExpert> allocate_expert() override {
    moerun_expert* e = nullptr;
    check([&](moerun_backend_error* err) { return ops_.allocate_expert(b_, &e, err); });
    return std::make_unique<CExpert>(b_, ops_, e);
  }
  void load_expert(const void* raw, ResidentExpert& into) override {
    check([&](moerun_backend_error* err) { return ops_.load_expert(b_, raw, static_cast<CExpert&>(into).handle(), err); });
  }
  void begin(const float* gathered, int64_t rows, float* results) override {
    check([&](moerun_backend_error* err) { return ops_.begin(b_, gathered, rows, results, err); });
  }
  RowBuffers row_buffers(int64_t rows) override {
    RowBuffers r;
    check([&](moerun_backend_error* err) { return ops_.row_buffers(b_, rows, &r.gathered, &r.results, err); });
    return r;
  }
  void run(const ExpertRun& r) override {
    const auto* e = static_cast<const CExpert*>(r.expert);
    check([&](moerun_backend_error* err) { return ops_.run(b_, e->handle(), r.offset, r.rows, err); });
  }
  void finish() override {
    check([&](moerun_backend_error* err) { return ops_.finish(b_, err); });
  }
  std::vector<double> dense_matmul_seconds(int64_t M, int64_t N, int64_t K, int warmup, int iters) override {
    std::vector<double> out(static_cast<std::size_t>(std::max(iters, 0)));
    check([&](moerun_backend_error* err) { return ops_.dense_matmul_seconds(b_, M, N, K, warmup, iters, out.data(), err); });
    return out;
  }
  double copy_seconds() const override { return ops_.copy_seconds(b_); }

 private:
  template <typename F>
  void check(F&& call) const {
    moerun_backend_error err{};
    const int rc = call(&err);
    if (rc != MOERUN_BACKEND_OK) throw_library_error(rc, err, library_, "a backend call failed");
  }
  int64_t value(int (*fn)(moerun_backend*, int64_t*, moerun_backend_error*)) const {
    int64_t v = 0;
    check([&](moerun_backend_error* err) { return fn(b_, &v, err); });
    return v;
  }

  moerun_backend* b_;
  moerun_backend_ops ops_;
  std::string library_;
  model::WeightFormat format_;
};

}  // namespace

std::unique_ptr<ExpertBackend> open_c_backend(moerun_backend_open_fn open, const std::string& library, const model::ModelConfig& config,
                                              int local_rank) {
  const moerun_backend_model model{MOERUN_BACKEND_ABI_VERSION,
                                   config.hidden_size,
                                   config.intermediate_size,
                                   static_cast<int32_t>(config.dtype),
                                   static_cast<int32_t>(config.expert_format.scheme),
                                   local_rank,
                                   config.expert_bias ? 1 : 0,
                                   static_cast<int32_t>(config.expert_activation),
                                   config.swiglu_alpha,
                                   config.swiglu_limit};
  moerun_backend_ops ops{};
  moerun_backend_error err{};
  moerun_backend* b = open(&model, &ops, &err);
  if (!b) throw_library_error(err.code, err, library, "the backend did not open");
  if (ops.abi_version != MOERUN_BACKEND_ABI_VERSION || ops.size < sizeof(moerun_backend_ops)) {
    if (ops.destroy) ops.destroy(b);
    fail(ErrorKind::Usage, library, ": backend interface version ", ops.abi_version, " (", ops.size, "-byte ops), this moerun needs ",
         MOERUN_BACKEND_ABI_VERSION, " (", sizeof(moerun_backend_ops), " bytes); rebuild the library with this moerun");
  }
  return std::make_unique<CBackend>(b, ops, library, config.expert_format);
}

}  // namespace moerun::experts

// oneDNN matmul with a per-shape primitive cache. Weights are passed in their PyTorch layout
// (memory tag "ba" on logical [K, N]) so no copy of the weights is ever made.
#include "base/matmul.hpp"

#include <dnnl.hpp>
#include <unordered_map>

#include "base/error.hpp"

namespace moerun {
namespace {

// Wraps a oneDNN call: dnnl::error becomes a moerun::Error naming the call and its status.
#define DNNL_CHECK(expr)                                                                        \
  [&]() -> decltype(auto) {                                                                    \
    try {                                                                                      \
      return expr;                                                                             \
    } catch (const dnnl::error& e) {                                                           \
      throw ::moerun::Error(::moerun::ErrorKind::Internal,                                     \
                            ::moerun::str("oneDNN: ", #expr, " failed (status ", e.status,     \
                                          ": ", e.what(), ") at ", __FILE__, ":", __LINE__)); \
    }                                                                                          \
  }()

struct ShapeKey {
  int64_t m, k, n;
  bool bf16;
  bool operator==(const ShapeKey&) const = default;
};

struct ShapeKeyHash {
  std::size_t operator()(const ShapeKey& s) const {
    std::size_t h = std::hash<int64_t>()(s.m);
    h = h * 1000003u ^ std::hash<int64_t>()(s.k);
    h = h * 1000003u ^ std::hash<int64_t>()(s.n);
    return h * 2u + s.bf16;
  }
};

}  // namespace

struct Matmul::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<ShapeKey, dnnl::matmul, ShapeKeyHash> cache;
  AlignedBuffer x_bf16;

  dnnl::matmul& get(const ShapeKey& key) {
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    if (cache.size() > 4096) cache.clear();  // bound memory if shapes keep changing
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dt in = key.bf16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc src({key.m, key.k}, in, tag::ab);
    dnnl::memory::desc wei({key.k, key.n}, in, tag::ba);
    dnnl::memory::desc dst({key.m, key.n}, dt::f32, tag::ab);
    auto pd = DNNL_CHECK(dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), engine));
    return cache.emplace(key, DNNL_CHECK(dnnl::matmul(pd))).first->second;
  }

  void run(const void* x, int64_t M, const WeightMatrix& W, float* y, bool bf16) {
    if (M == 0) return;
    const ShapeKey key{M, W.cols, W.rows, bf16};
    dnnl::matmul& prim = get(key);
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    dnnl::memory src({{M, W.cols}, in, tag::ab}, engine, const_cast<void*>(x));
    dnnl::memory wei({{W.cols, W.rows}, in, tag::ba}, engine, const_cast<void*>(W.data.data()));
    dnnl::memory dst({{M, W.rows}, dt::f32, tag::ab}, engine, y);
    DNNL_CHECK(prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}}));
    stream.wait();
  }
};

Matmul::Matmul() : impl_(std::make_unique<Impl>()) {}
Matmul::~Matmul() = default;

void Matmul::linear(const float* x, int64_t M, const WeightMatrix& W, float* y) {
  if (W.dtype == DType::F32) {
    impl_->run(x, M, W, y, false);
    return;
  }
  const std::size_t n = static_cast<std::size_t>(M * W.cols);
  impl_->x_bf16.resize(n * 2);
  f32_to_bf16(x, impl_->x_bf16.as<uint16_t>(), n);
  impl_->run(impl_->x_bf16.data(), M, W, y, true);
}

void Matmul::linear_bf16(const uint16_t* x, int64_t M, const WeightMatrix& W, float* y) {
  if (W.dtype != DType::BF16) fail(ErrorKind::Internal, "Matmul::linear_bf16 on a float32 weight");
  impl_->run(x, M, W, y, true);
}

const char* Matmul::isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "other";
  }
}

}  // namespace moerun

// oneDNN matmul with a per-shape primitive cache, optional pre-packed weights, fused epilogues
// (SiLU, multiply) and the bf16 row padding that avoids oneDNN's slow M blockings. Weights in
// PyTorch layout are described as memory tag "ba" on logical [K, N], so plain weights are never copied.
#include "base/matmul.hpp"

#include "base/weight_scheme_table.hpp"

#include "base/quant_matmul.hpp"

#include <dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include "base/amx_bf16_panel.hpp"
#include "base/error.hpp"
#include "base/native_matmul.hpp"
#include "base/small_m_matmul.hpp"

namespace moerun {
namespace {

// Wraps a oneDNN call: dnnl::error becomes a moerun::Error naming the call and its status.
#define DNNL_CHECK(expr)                                                                                                                  \
  [&]() -> decltype(auto) {                                                                                                               \
    try {                                                                                                                                 \
      return expr;                                                                                                                        \
    } catch (const dnnl::error& e) {                                                                                                      \
      throw ::moerun::Error(::moerun::ErrorKind::Internal, ::moerun::str("oneDNN: ", #expr, " failed (status ", e.status, ": ", e.what(), \
                                                                         ") at ", __FILE__, ":", __LINE__));                              \
    }                                                                                                                                     \
  }()

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dt to_dnnl(DType t) {
  return t == DType::F32 ? dt::f32 : dt::bf16;
}

struct ShapeKey {
  int64_t m, k, n;
  DType in, out;
  Epilogue ep;
  const PackedLayout* layout;
  bool operator==(const ShapeKey&) const = default;
};

struct ShapeKeyHash {
  std::size_t operator()(const ShapeKey& s) const {
    std::size_t h = std::hash<int64_t>()(s.m);
    h = h * 1000003u ^ std::hash<int64_t>()(s.k);
    h = h * 1000003u ^ std::hash<int64_t>()(s.n);
    h = h * 1000003u ^ std::hash<const void*>()(s.layout);
    return h * 64u + static_cast<std::size_t>(s.in) * 16u + static_cast<std::size_t>(s.out) * 4u + static_cast<std::size_t>(s.ep);
  }
};

dnnl::memory::desc plain_weights(int64_t k, int64_t n, DType t) {
  return dnnl::memory::desc({k, n}, to_dnnl(t), tag::ba);
}

}  // namespace

struct PackedLayout {
  dnnl::memory::desc desc;
  BlockedLayout blocked = BlockedLayout::None;  // when the small-M kernels can read it
};

namespace {
// Is `d` (logical weights [K, N]) one of the layouts the small-M kernels read (exactly, strides
// included)?
BlockedLayout classify(const dnnl::memory::desc& d, int64_t K) {
  const dnnl_memory_desc_t& m = d.data;
  if (m.format_kind != dnnl_blocked || m.ndims != 2 || m.offset0 != 0) return BlockedLayout::None;
  const auto& b = m.format_desc.blocking;
  auto kpad = [&](int64_t block) { return (K + block - 1) / block * block; };
  if (m.data_type == dnnl_f32 && b.inner_nblks == 2 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 && b.inner_blks[1] == 64 &&
      b.inner_idxs[1] == 1 && b.strides[0] == 16 * 64 && b.strides[1] == kpad(16) * 64)
    return BlockedLayout::F32_16a64b;
  if (m.data_type == dnnl_bf16 && b.inner_nblks == 3 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 && b.inner_blks[1] == 64 &&
      b.inner_idxs[1] == 1 && b.inner_blks[2] == 2 && b.inner_idxs[2] == 0 && b.strides[0] == 32 * 64 && b.strides[1] == kpad(32) * 64)
    return BlockedLayout::BF16_16a64b2a;
  return BlockedLayout::None;
}
// The part of a packed layout's name that says which layout: plain, one the hand kernels read, or
// another of oneDNN's.
const char* layout_tag(const PackedLayout* l) {
  if (!l) return "/plain-";
  return l->blocked == BlockedLayout::F32_16a64b      ? "/packed16a64b-"
         : l->blocked == BlockedLayout::BF16_16a64b2a ? "/packed16a64b2a-"
                                                      : "/packed-";
}

// oneDNN 2.6 has bf16 matmuls only from AVX-512 up (avx512_core). Below that (AVX2 CPUs: AMD Zen 2/3,
// Intel client cores) bf16 weights are held widened to float32 and their GEMMs run in float32 on the
// same bf16-rounded x: the products are exact either way, only the summation order differs. Probed
// once per process (oneDNN's ISA is the process's: ONEDNN_MAX_CPU_ISA caps it).
bool onednn_has_bf16() {
  static const bool has = [] {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const dnnl::memory::desc x({16, 32}, dt::bf16, tag::ab), y({16, 32}, dt::f32, tag::ab);
    try {
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(x, plain_weights(32, 32, DType::BF16), y), engine);
      return true;
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_unimplemented) return false;
      throw Error(ErrorKind::Internal, str("oneDNN: probing bf16 matmul failed (status ", e.status, ": ", e.what(), ")"));
    }
  }();
  return has;
}

// The dtype a matrix of dtype `t` is held and multiplied in: bf16 widened where oneDNN has none.
DType held_dtype(DType t) {
  return t == DType::BF16 && !onednn_has_bf16() ? DType::F32 : t;
}
}  // namespace

struct Matmul::Impl {
  static constexpr int64_t kChunk = Matmul::kRowChunk;

  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<ShapeKey, dnnl::matmul, ShapeKeyHash> cache;
  // One layout object per (K, N, dtype), shared by every matrix packed alike (one cache entry).
  std::unordered_map<ShapeKey, std::shared_ptr<const PackedLayout>, ShapeKeyHash> layouts;
  AlignedBuffer x_bf16, unpacked, x_pad, y_pad, o_pad, small_out, x_wide, y_wide;
  QuantizedRows xq;  // x quantized for q8/q4 weights
  bool hand_kernels = true;
  static DType held(const WeightMatrix& W) { return held_dtype(W.dtype); }

  static int64_t pad_chunk(int64_t m) {
    if (m <= 16) return m;
    return m <= 256 ? (m + 15) / 16 * 16 : (m + 31) / 32 * 32;
  }

  dnnl::matmul::primitive_desc make_pd(const ShapeKey& key, const dnnl::memory::desc& wei) {
    dnnl::memory::desc src({key.m, key.k}, to_dnnl(key.in), tag::ab);
    dnnl::memory::desc dst({key.m, key.n}, to_dnnl(key.out), tag::ab);
    dnnl::post_ops po;
    if (key.ep == Epilogue::Silu) po.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
    if (key.ep == Epilogue::MulBy) po.append_binary(dnnl::algorithm::binary_mul, dnnl::memory::desc({key.m, key.n}, dt::f32, tag::ab));
    dnnl::primitive_attr attr;
    attr.set_post_ops(po);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), attr, engine);
  }

  // Primitive for the shape, or nullptr when oneDNN has no implementation for a packed layout at
  // this M (then the caller unpacks).
  dnnl::matmul* get(const ShapeKey& key) {
    auto it = cache.find(key);
    if (it != cache.end()) return &it->second;
    if (cache.size() > 4096) cache.clear();  // bound memory if shapes keep changing
    const dnnl::memory::desc wei = key.layout ? key.layout->desc : plain_weights(key.k, key.n, key.in);
    try {
      return &cache.emplace(key, dnnl::matmul(make_pd(key, wei))).first->second;
    } catch (const dnnl::error& e) {
      if (key.layout && e.status == dnnl_unimplemented) return nullptr;
      throw Error(ErrorKind::Internal, str("oneDNN: matmul primitive for [", key.m, "x", key.k, "]x[", key.k, "x", key.n,
                                           "] failed (status ", e.status, ": ", e.what(), ")"));
    }
  }

  // The hand-written kernels (base/small_m_matmul), where W's layout and the CPU allow: the
  // streaming kernels for the few rows of decode, which read the weights faster than oneDNN's brgemm
  // (issue 11), and the panel kernel for every other M. Both sum each output in the same order, so a
  // row's bits do not depend on M (issue 44); the epilogue is the same code in both. False: oneDNN
  // runs it.
  bool run_hand(const void* x, int64_t M, const WeightMatrix& W, void* y, DType out, Epilogue ep, const float* other) {
    if (!hand_kernels || !Matmul::uses_hand_kernels(W)) return false;
    PanelEpilogue pe;
    pe.silu = ep == Epilogue::Silu;
    pe.mul_by = ep == Epilogue::MulBy ? other : nullptr;
    pe.bf16_out = out != DType::F32;
    if (!Matmul::uses_small_m(W, M)) {
      if (!Matmul::uses_panel(W, M)) return false;
      panel_matmul(W.packed->blocked, x, M, W.cols, W.rows, W.data.data(), y, pe);
      return true;
    }
    const int64_t N = W.rows;
    float* acc = static_cast<float*>(y);
    if (out != DType::F32) {
      small_out.resize(static_cast<std::size_t>(M * N) * 4);
      acc = small_out.as<float>();
    }
    small_m_matmul(W.packed->blocked, x, M, W.cols, N, W.data.data(), acc);
    if (ep != Epilogue::None || out != DType::F32) apply_panel_epilogue(acc, M, N, pe, y);
    return true;
  }

  // One primitive execution on exactly M rows.
  void run(const void* x, int64_t M, const WeightMatrix& W, void* y, DType out, Epilogue ep, const float* other) {
    if (M == 0) return;
    if (run_hand(x, M, W, y, out, ep, other)) return;
    if (held(W) != W.dtype) {
      run_widened(x, M, W, y, out, ep, other);
      return;
    }
    run_onednn(x, M, W, W.data.data(), y, out, ep, other);
  }

  // bf16 weights held in float32 (no bf16 matmul in oneDNN here): x widened (exactly) and, for a bf16 result,
  // the float32 result rounded after. A matrix that was never packed is widened here, per call.
  void run_widened(const void* x, int64_t M, const WeightMatrix& W, void* y, DType out, Epilogue ep, const float* other) {
    const std::size_t nx = static_cast<std::size_t>(M * W.cols), ny = static_cast<std::size_t>(M * W.rows);
    x_wide.resize(nx * 4);
    bf16_to_f32(static_cast<const uint16_t*>(x), x_wide.as<float>(), nx);
    const void* w = W.data.data();
    if (!W.packed) {
      unpacked.resize(static_cast<std::size_t>(W.rows * W.cols) * 4);
      bf16_to_f32(W.data.as<uint16_t>(), unpacked.as<float>(), static_cast<std::size_t>(W.rows * W.cols));
      w = unpacked.data();
    }
    if (out == DType::F32) {
      run_onednn(x_wide.data(), M, W, w, y, DType::F32, ep, other);
      return;
    }
    y_wide.resize(ny * 4);
    run_onednn(x_wide.data(), M, W, w, y_wide.data(), DType::F32, ep, other);
    f32_to_bf16(y_wide.as<float>(), static_cast<uint16_t*>(y), ny);
  }

  // y = x·Wᵀ in oneDNN, W's bytes at `w` in the dtype they are held in (x in it too).
  void run_onednn(const void* x, int64_t M, const WeightMatrix& W, const void* w, void* y, DType out, Epilogue ep, const float* other) {
    const DType wt = held(W);
    ShapeKey key{M, W.cols, W.rows, wt, out, ep, W.packed.get()};
    dnnl::matmul* prim = get(key);
    dnnl::memory::desc wdesc = W.packed ? W.packed->desc : plain_weights(W.cols, W.rows, wt);
    void* wptr = const_cast<void*>(w);
    if (!prim) {
      // Rare: no kernel takes the packed layout at this M. Unpack into scratch and run plain.
      const dnnl::memory::desc plain = plain_weights(W.cols, W.rows, wt);
      unpacked.resize(plain.get_size());
      dnnl::memory from(wdesc, engine, wptr), to(plain, engine, unpacked.data());
      DNNL_CHECK(dnnl::reorder(from, to).execute(stream, from, to));
      wdesc = plain;
      wptr = unpacked.data();
      key.layout = nullptr;
      prim = get(key);
    }
    dnnl::memory src({{M, W.cols}, to_dnnl(wt), tag::ab}, engine, const_cast<void*>(x));
    dnnl::memory wei(wdesc, engine, wptr);
    dnnl::memory dst({{M, W.rows}, to_dnnl(out), tag::ab}, engine, y);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    if (ep == Epilogue::MulBy)
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                   dnnl::memory({{M, W.rows}, dt::f32, tag::ab}, engine, const_cast<float*>(other)));
    DNNL_CHECK(prim->execute(stream, args));
    stream.wait();
  }

  // bf16: chunks of <= 512 rows, each padded to a good M (see padded_rows).
  void run_chunked(const void* x, int64_t M, const WeightMatrix& W, void* y, DType out, Epilogue ep, const float* other, int64_t capacity) {
    if (held(W) == DType::F32 || (hand_kernels && Matmul::uses_hand_kernels(W) && Matmul::rows_independent(W.dtype))) {
      run(x, M, W, y, out, ep, other);
      return;
    }
    const int64_t K = W.cols, N = W.rows;
    const std::size_t ys = dtype_size(out);
    for (int64_t start = 0; start < M; start += kChunk) {
      const int64_t m = std::min(kChunk, M - start), mp = pad_chunk(m);
      const auto* xs = static_cast<const uint16_t*>(x) + start * K;
      char* yc = static_cast<char*>(y) + static_cast<std::size_t>(start * N) * ys;
      const float* oc = other ? other + start * N : nullptr;
      if (mp == m || start + mp <= capacity) {
        run(xs, mp, W, yc, out, ep, oc);
        continue;
      }
      x_pad.resize(static_cast<std::size_t>(mp * K) * 2);
      std::memcpy(x_pad.data(), xs, static_cast<std::size_t>(m * K) * 2);
      std::memset(x_pad.as<uint16_t>() + m * K, 0, static_cast<std::size_t>((mp - m) * K) * 2);
      y_pad.resize(static_cast<std::size_t>(mp * N) * ys);
      if (oc) {
        o_pad.resize(static_cast<std::size_t>(mp * N) * 4);
        std::memcpy(o_pad.data(), oc, static_cast<std::size_t>(m * N) * 4);
        oc = o_pad.as<float>();
      }
      run(x_pad.data(), mp, W, y_pad.data(), out, ep, oc);
      std::memcpy(yc, y_pad.data(), static_cast<std::size_t>(m * N) * ys);
    }
  }
};

bool Matmul::uses_hand_kernels(const WeightMatrix& W) {
  return W.packed && W.packed->blocked != BlockedLayout::None && small_m_supported(W.packed->blocked);
}

bool Matmul::rows_independent(DType t) {
  if (t == DType::F32) return small_m_supported(BlockedLayout::F32_16a64b);
  return small_m_supported(BlockedLayout::BF16_16a64b2a) && onednn_has_bf16();
}

bool Matmul::bf16_widened() {
  return !onednn_has_bf16();
}

bool Matmul::uses_panel(const WeightMatrix& W, int64_t M) {
  return uses_hand_kernels(W) && !uses_small_m(W, M) && rows_independent(W.dtype);
}

bool Matmul::uses_small_m(const WeightMatrix& W, int64_t M) {
  // With AMX every bf16 GEMM is the panel's (its AMX sums differ from the streaming kernels' bits).
  if (W.dtype == DType::BF16 && amx_bf16_panel_supported()) return false;
  const int64_t rows = W.rows * W.cols <= kTwoPassMaxElements ? small_m_max_rows() : kSmallM;
  return M >= 1 && M <= rows && uses_hand_kernels(W);
}

Matmul::Matmul(bool hand_kernels) : impl_(std::make_unique<Impl>()) {
  impl_->hand_kernels = hand_kernels;
}
Matmul::~Matmul() = default;
bool Matmul::hand_kernels() const {
  return impl_->hand_kernels;
}

int64_t Matmul::padded_rows(int64_t M) {
  if (M <= Impl::kChunk) return Impl::pad_chunk(M);
  const int64_t full = M / Impl::kChunk * Impl::kChunk;
  return full + Impl::pad_chunk(M - full);
}

void Matmul::gemm(const void* x, int64_t M, const WeightMatrix& W, void* y, DType y_dtype, Epilogue ep, const float* other,
                  int64_t rows_capacity) {
  if (W.scheme != WeightScheme::Plain) fail(ErrorKind::Internal, "Matmul::gemm: a q8/q4 matrix goes through linear()");
  impl_->run_chunked(x, M, W, y, y_dtype, ep, other, rows_capacity);
}

void Matmul::linear(const float* x, int64_t M, const WeightMatrix& W, float* y) {
  switch (weight_scheme_row(W.scheme).kernels) {
    case WeightKernels::Native:  // mxfp4 / fp8-block as shipped, float32 activations
      native_matmul(W.scheme, x, M, W.cols, W.rows, W.data.as<uint8_t>(), y);
      return;
    case WeightKernels::Group:  // q8 / q4 / int4 over int8-quantized activations
      quantize_activations(x, M, W.cols, impl_->xq);
      quant_matmul(W.scheme, impl_->xq, W.rows, W.data.as<uint8_t>(), y);
      return;
    case WeightKernels::Dense: break;
  }
  if (W.dtype == DType::F32) {
    impl_->run(x, M, W, y, DType::F32, Epilogue::None, nullptr);
    return;
  }
  const std::size_t n = static_cast<std::size_t>(M * W.cols);
  impl_->x_bf16.resize(n * 2);
  f32_to_bf16(x, impl_->x_bf16.as<uint16_t>(), n);
  impl_->run_chunked(impl_->x_bf16.data(), M, W, y, DType::F32, Epilogue::None, nullptr, 0);
}

void Matmul::quantize(WeightMatrix& W, WeightScheme s) {
  if (!is_group_quantized(s) || W.scheme != WeightScheme::Plain || W.packed || W.cols % kQuantGroup != 0)
    fail(ErrorKind::Internal, "Matmul::quantize: needs a plain row-major matrix of whole groups of 32 columns");
  AlignedBuffer blocked(W.data.pool());  // where W's memory comes from (a HugePagePool, or the heap)
  blocked.resize(static_cast<std::size_t>(quant_blocked_bytes(s, W.rows, W.cols)));
  quant_pack_plain(s, W.data.data(), W.dtype == DType::BF16, W.rows, W.cols, blocked.as<uint8_t>());
  W.data = std::move(blocked);
  W.scheme = s;
}

std::shared_ptr<const PackedLayout> Matmul::layout_for(DType t, int64_t rows, int64_t cols, int64_t typical_rows) {
  const ShapeKey lkey{0, cols, rows, t, DType::F32, Epilogue::None, nullptr};
  auto& layout = impl_->layouts[lkey];
  if (!layout) {
    auto l = std::make_shared<PackedLayout>();
    if (impl_->hand_kernels && rows_independent(t)) {
      // The layout the hand kernels read, whatever oneDNN would prefer for this shape: then every
      // GEMM on the matrix runs in them (batch invariance needs all of them).
      l->desc = dnnl::memory::desc({cols, rows}, to_dnnl(t), t == DType::F32 ? tag::BA16a64b : tag::BA16a64b2a);
    } else {
      // bf16 without oneDNN's bf16 matmul: the float32 layout, which the plain bf16 is widened into.
      const DType h = held_dtype(t);
      dnnl::memory::desc any({cols, rows}, to_dnnl(h), tag::any);
      ShapeKey key = lkey;
      key.m = typical_rows;
      key.in = h;
      l->desc = DNNL_CHECK(impl_->make_pd(key, any)).weights_desc();
    }
    // The hand kernels read a layout of the matrix's own dtype only.
    l->blocked = l->desc.data_type() == to_dnnl(t) ? classify(l->desc, cols) : BlockedLayout::None;
    layout = l;
  }
  if (layout->desc == plain_weights(cols, rows, t)) return nullptr;  // the plain layout is the preferred one
  return layout;
}

std::size_t Matmul::packed_bytes(DType t, int64_t rows, int64_t cols, int64_t typical_rows) {
  const std::size_t plain = static_cast<std::size_t>(rows * cols) * dtype_size(t);
  const auto layout = layout_for(t, rows, cols, typical_rows);
  return layout ? std::max(plain, layout->desc.get_size()) : plain;
}

void Matmul::pack_from(const void* plain, DType t, int64_t rows, int64_t cols, WeightMatrix& W, int64_t typical_rows) {
  const auto layout = layout_for(t, rows, cols, typical_rows);
  W.dtype = t;
  W.rows = rows;
  W.cols = cols;
  W.packed = layout;
  if (!layout) {
    W.data.resize(W.bytes());
    std::memcpy(W.data.data(), plain, W.bytes());
    return;
  }
  W.data.resize(layout->desc.get_size());
  AlignedBuffer widened;  // freed on return: a scratch member would keep the largest matrix's copy
  if (layout->desc.data_type() != to_dnnl(t)) {  // bf16 held widened (held_dtype)
    widened = AlignedBuffer(static_cast<std::size_t>(rows * cols) * 4);
    bf16_to_f32(static_cast<const uint16_t*>(plain), widened.as<float>(), static_cast<std::size_t>(rows * cols));
    plain = widened.data();
    t = DType::F32;
  }
  dnnl::memory from(plain_weights(cols, rows, t), impl_->engine, const_cast<void*>(plain));
  dnnl::memory to(layout->desc, impl_->engine, W.data.data());
  DNNL_CHECK(dnnl::reorder(from, to).execute(impl_->stream, from, to));
  impl_->stream.wait();
}

void Matmul::shape_packed(WeightMatrix& W, DType t, int64_t rows, int64_t cols, int64_t typical_rows) {
  W.dtype = t;
  W.rows = rows;
  W.cols = cols;
  W.packed = layout_for(t, rows, cols, typical_rows);
  W.data.resize(W.packed ? W.packed->desc.get_size() : W.bytes());
}

std::string Matmul::packed_layout_name(DType t, int64_t rows, int64_t cols, int64_t typical_rows) {
  const dnnl_version_t* v = dnnl_version();
  return std::string("onednn-") + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) + "/" +
         isa_name() + "/" + dtype_name(t) + "/" + std::to_string(rows) + "x" + std::to_string(cols) + "/m" + std::to_string(typical_rows) +
         layout_tag(layout_for(t, rows, cols, typical_rows).get()) + std::to_string(packed_bytes(t, rows, cols, typical_rows));
}

void Matmul::pack(WeightMatrix& W, int64_t typical_rows) {
  if (W.packed || W.scheme != WeightScheme::Plain) return;  // q8/q4: quant_matmul's form already
  if (!layout_for(W.dtype, W.rows, W.cols, typical_rows)) return;
  const AlignedBuffer plain = std::move(W.data);
  W.data = AlignedBuffer(plain.pool());
  pack_from(plain.data(), W.dtype, W.rows, W.cols, W, typical_rows);
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

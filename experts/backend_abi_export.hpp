// The library side of the C interface (experts/backend_abi.h): an ExpertBackend behind opaque
// handles, every call guarded so that no exception leaves the library and errors travel as codes
// and messages. Header-only, for backend libraries (libmoerun_cuda.so; the test library that wraps
// the CPU backend to check the boundary on a machine without a GPU).
#pragma once
#include <algorithm>
#include <cstdio>
#include <memory>
#include <new>
#include <vector>

#include "base/error.hpp"
#include "experts/backend.hpp"
#include "experts/backend_abi.h"

struct moerun_backend {
  std::unique_ptr<moerun::experts::ExpertBackend> impl;
};
struct moerun_expert {
  std::unique_ptr<moerun::experts::ResidentExpert> impl;
};

namespace moerun::experts {
namespace abi {

inline void set_error(moerun_backend_error* err, int code, const char* what) {
  if (!err) return;
  err->code = code;
  std::snprintf(err->message, sizeof err->message, "%s", what);
}

template <typename F>
int guarded(moerun_backend_error* err, F&& f) {
  try {
    f();
    return MOERUN_BACKEND_OK;
  } catch (const Error& e) {
    set_error(err, e.exit_code(), e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    set_error(err, 1, "out of memory");
    return 1;
  } catch (const std::exception& e) {
    set_error(err, 1, e.what());
    return 1;
  }
}

inline BackendTiming& timing_of(moerun_backend* b) {
  BackendTiming* t = b->impl->timing();
  if (!t) fail(ErrorKind::Usage, b->impl->describe(), " has no timing interface");
  return *t;
}

inline moerun_backend_ops ops() {
  moerun_backend_ops o{};
  o.abi_version = MOERUN_BACKEND_ABI_VERSION;
  o.size = sizeof(moerun_backend_ops);
  o.destroy = [](moerun_backend* b) { delete b; };
  o.describe = [](moerun_backend* b, char* out, size_t n, moerun_backend_error* err) {
    return guarded(err, [&] { std::snprintf(out, n, "%s", b->impl->describe().c_str()); });
  };
  o.weight_memory = [](moerun_backend* b) { return static_cast<int32_t>(b->impl->weight_memory()); };
  o.expert_bytes = [](moerun_backend* b, int64_t* v, moerun_backend_error* err) {
    return guarded(err, [&] { *v = b->impl->expert_bytes(); });
  };
  o.memory_bytes = [](moerun_backend* b, int64_t* v, moerun_backend_error* err) {
    return guarded(err, [&] { *v = b->impl->memory_bytes(); });
  };
  o.allocate_expert = [](moerun_backend* b, moerun_expert** out, moerun_backend_error* err) {
    return guarded(err, [&] { *out = new moerun_expert{b->impl->allocate_expert()}; });
  };
  o.free_expert = [](moerun_backend*, moerun_expert* e) { delete e; };
  o.expert_buffer = [](moerun_backend*, const moerun_expert* e, moerun_buffer_info* out) {
    const BufferInfo i = e->impl->buffer();
    *out = {static_cast<int32_t>(i.kind), i.bytes, i.allocated};
  };
  o.load_expert = [](moerun_backend* b, const void* raw, moerun_expert* into, moerun_backend_error* err) {
    return guarded(err, [&] { b->impl->load_expert(raw, *into->impl); });
  };
  o.row_buffers = [](moerun_backend* b, int64_t rows, float** g, float** r, moerun_backend_error* err) {
    return guarded(err, [&] {
      const RowBuffers rb = b->impl->row_buffers(rows);
      *g = rb.gathered;
      *r = rb.results;
    });
  };
  o.begin = [](moerun_backend* b, const float* g, int64_t rows, float* r, moerun_backend_error* err) {
    return guarded(err, [&] { b->impl->begin(g, rows, r); });
  };
  o.run = [](moerun_backend* b, const moerun_expert* e, int64_t offset, int64_t rows, moerun_backend_error* err) {
    return guarded(err, [&] { b->impl->run({e->impl.get(), offset, rows}); });
  };
  o.finish = [](moerun_backend* b, moerun_backend_error* err) { return guarded(err, [&] { b->impl->finish(); }); };
  o.dense_matmul_seconds = [](moerun_backend* b, int64_t m, int64_t n, int64_t k, int32_t warmup, int32_t iters, double* out,
                              moerun_backend_error* err) {
    return guarded(err, [&] {
      const std::vector<double> s = timing_of(b).dense_matmul_seconds(m, n, k, warmup, iters);
      std::copy_n(s.begin(), std::min<std::size_t>(s.size(), static_cast<std::size_t>(std::max(iters, 0))), out);
    });
  };
  o.copy_seconds = [](moerun_backend* b) { return b->impl->timing() ? b->impl->timing()->copy_seconds() : 0.0; };
  return o;
}

}  // namespace abi

// The body of a library's entry point: checks the version, builds the backend with
// make(config, local_rank), fills `ops`; NULL with `err` set on any failure.
template <typename Make>
moerun_backend* export_backend(const moerun_backend_model* model, moerun_backend_ops* ops, moerun_backend_error* err, Make&& make) {
  moerun_backend* b = nullptr;
  abi::guarded(err, [&] {
    if (model->abi_version != MOERUN_BACKEND_ABI_VERSION)
      fail(ErrorKind::Usage, "backend library: interface version ", MOERUN_BACKEND_ABI_VERSION, ", asked for ", model->abi_version,
           "; use the library built with this moerun");
    model::ModelConfig c;
    c.hidden_size = model->hidden_size;
    c.intermediate_size = model->intermediate_size;
    c.dtype = static_cast<DType>(model->dtype);
    c.expert_format = {c.dtype, static_cast<WeightScheme>(model->weight_scheme)};
    if ((model->expert_bias != 0 && model->expert_bias != 1) || (model->activation != 0 && model->activation != 1))
      fail(ErrorKind::Usage, "backend library: expert_bias ", model->expert_bias, " or activation ", model->activation, " out of range");
    c.expert_bias = model->expert_bias == 1;
    c.expert_activation = static_cast<model::ExpertActivation>(model->activation);
    c.swiglu_alpha = model->swiglu_alpha;
    c.swiglu_limit = model->swiglu_limit;
    auto impl = make(c, model->local_rank);
    *ops = abi::ops();
    b = new moerun_backend{std::move(impl)};
  });
  return b;
}

}  // namespace moerun::experts

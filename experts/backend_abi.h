/* The versioned C interface between moerun and a backend library it loads with dlopen
 * (libmoerun_cuda.so): plain structs, function pointers, error codes and a message buffer, so no
 * C++ vtable, std::string or exception crosses the boundary (compare ggml's backend registry).
 * moerun asks for MOERUN_BACKEND_ABI_VERSION; a library of another version refuses, and moerun
 * refuses a library whose ops table is older than its own. experts/c_backend.hpp adapts it to
 * ExpertBackend. Every function that can fail returns MOERUN_BACKEND_OK (0) or an ErrorKind code
 * (1 internal, 2 usage, 3 bad input, 4 I/O) with a one-line message in `err`. */
#ifndef MOERUN_BACKEND_ABI_H
#define MOERUN_BACKEND_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MOERUN_BACKEND_ABI_VERSION 2u /* 2: the expert biases and the activation */
#define MOERUN_BACKEND_OK 0
#define MOERUN_CUDA_BACKEND_OPEN_SYMBOL "moerun_cuda_backend_open_v1"

typedef struct moerun_backend_error {
  int32_t code;
  char message[1024];
} moerun_backend_error;

/* What the backend computes: one expert's shapes and weight format (model::WeightFormat's values). */
typedef struct moerun_backend_model {
  uint32_t abi_version;
  int64_t hidden_size;
  int64_t intermediate_size;
  int32_t dtype; /* moerun::DType */
  int32_t weight_scheme; /* moerun::model::WeightScheme */
  int32_t local_rank; /* the rank's index on its host: picks the device */
  int32_t expert_bias; /* 1: b1, b3 [ff] and b2 [d] follow w1, w3, w2 in the raw form, in dtype */
  int32_t activation; /* moerun::model::ExpertActivation: 0 SwiGLU, 1 gpt-oss's clamped SwiGLU */
  double swiglu_alpha; /* clamped SwiGLU: (up + 1) * gate * sigmoid(alpha * gate), */
  double swiglu_limit; /* gate clamped above at limit, up to [-limit, limit] */
} moerun_backend_model;

typedef struct moerun_buffer_info {
  int32_t memory_kind; /* moerun::MemoryKind */
  uint64_t bytes;
  uint64_t allocated;
} moerun_buffer_info;

typedef struct moerun_backend moerun_backend; /* opaque, the library's */
typedef struct moerun_expert moerun_expert; /* opaque, the library's */

/* The ExpertBackend operations (experts/backend.hpp says what each does). */
typedef struct moerun_backend_ops {
  uint32_t abi_version;
  uint32_t size; /* sizeof(moerun_backend_ops) as the library was built */
  void (*destroy)(moerun_backend* b);
  int (*describe)(moerun_backend* b, char* out, size_t out_size, moerun_backend_error* err);
  int32_t (*weight_memory)(moerun_backend* b);
  int (*expert_bytes)(moerun_backend* b, int64_t* out, moerun_backend_error* err);
  int (*memory_bytes)(moerun_backend* b, int64_t* out, moerun_backend_error* err);
  int (*allocate_expert)(moerun_backend* b, moerun_expert** out, moerun_backend_error* err);
  void (*free_expert)(moerun_backend* b, moerun_expert* e);
  void (*expert_buffer)(moerun_backend* b, const moerun_expert* e, moerun_buffer_info* out);
  int (*load_expert)(moerun_backend* b, const void* raw, moerun_expert* into, moerun_backend_error* err);
  int (*row_buffers)(moerun_backend* b, int64_t rows, float** gathered, float** results, moerun_backend_error* err);
  int (*begin)(moerun_backend* b, const float* gathered, int64_t rows, float* results, moerun_backend_error* err);
  int (*run)(moerun_backend* b, const moerun_expert* e, int64_t offset, int64_t rows, moerun_backend_error* err);
  int (*finish)(moerun_backend* b, moerun_backend_error* err);
  /* `out` has room for `iters` seconds. */
  int (*dense_matmul_seconds)(moerun_backend* b, int64_t m, int64_t n, int64_t k, int32_t warmup, int32_t iters, double* out,
                              moerun_backend_error* err);
  double (*copy_seconds)(moerun_backend* b);
} moerun_backend_ops;

/* The library's one entry point: fills `ops` and returns a new backend, or NULL with `err` set. */
typedef moerun_backend* (*moerun_backend_open_fn)(const moerun_backend_model* model, moerun_backend_ops* ops, moerun_backend_error* err);

#ifdef __cplusplus
}
#endif
#endif /* MOERUN_BACKEND_ABI_H */

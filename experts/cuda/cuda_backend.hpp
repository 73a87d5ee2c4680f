// The CUDA expert backend (--device cuda): each expert lives in device memory (an L1 slot or a
// resident expert, allocated once), loads go through pinned staging on a per-loader-thread copy
// stream that first waits on an event recorded after the last compute that read the slot, and a
// layer's experts run as cuBLAS GEMMs (bf16 or fp32 inputs, fp32 accumulation) with a SiLU*mul
// kernel between, on one compute stream. Rows arrive and leave in host memory (the exchange is host
// based); begin() copies them in, finish() copies the results out and synchronises.
//
// Built only with CUDA, as its own shared library (libmoerun_cuda.so, next to the moerun binary)
// that make_expert_backend loads on --device cuda: cuBLAS maps ~700 MiB of address space, which
// the CPU path (and convert's memory bound) must not pay. This header has no CUDA types.
#pragma once
#include <memory>

#include "experts/backend.hpp"
#include "experts/backend_abi.h"

namespace moerun::experts {

// The backend on device (local_rank mod visible devices); Usage error when no device is visible.
std::unique_ptr<ExpertBackend> make_cuda_backend(const model::ModelConfig& config, int local_rank);

}  // namespace moerun::experts

// The library's entry point for dlopen, through the C interface of experts/backend_abi.h (what
// experts/backend.cpp loads; no C++ type crosses it).
extern "C" moerun_backend* moerun_cuda_backend_open_v1(const moerun_backend_model* model, moerun_backend_ops* ops,
                                                       moerun_backend_error* err);

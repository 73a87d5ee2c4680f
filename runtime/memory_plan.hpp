// Memory plan of a model (`moerun inspect`): parameter counts, bytes per expert, and the memory a
// router rank and an expert rank need for a given batch, context and number of experts held.
#pragma once
#include <cstdint>
#include <string>

#include "io/model_config.hpp"

namespace moerun::runtime {

struct MemoryPlanConfig {
  int64_t batch = 32;           // sequences in flight on a router rank
  int64_t context = 0;          // tokens per sequence (0: max_position)
  int64_t experts_per_rank = 0; // experts an expert rank holds (0: all)
  int64_t max_batch_tokens = 1024;
};

struct MemoryPlan {
  int64_t dense_bytes = 0;       // model.h5 in memory (embeddings/norms/gate as fp32)
  int64_t kv_bytes = 0;          // KV cache at batch x context
  int64_t activation_bytes = 0;  // step buffers on a router rank
  int64_t router_bytes = 0;
  int64_t expert_weight_bytes = 0;
  int64_t expert_scratch_bytes = 0;
  int64_t expert_rank_bytes = 0;
};

MemoryPlan plan_memory(const io::ModelConfig& c, const MemoryPlanConfig& p);
std::string inspect_report(const io::ModelConfig& c, const MemoryPlanConfig& p, const std::string& model_dir);

}  // namespace moerun::runtime

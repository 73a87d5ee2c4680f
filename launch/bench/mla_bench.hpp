// `moerun bench mla`: one decode step of one multi-head latent attention layer (DeepSeek), the
// absorbed form (attention over the compressed cache, what decode runs) against the expanded one
// (per-head keys and values recomputed from the cache), for batches of sequences at given context
// lengths, in one run: projections, attention and o_proj, with random weights of a real shape.
// With a DSA shape (deepseek_v32) the sparse step (the indexer over every cached key, then the
// absorbed attention over its index_topk positions) runs against the dense absorbed one, with both
// steps' attention FLOPs and cache bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/dtype.hpp"
#include "model/model_config.hpp"

namespace moerun::bench {

struct MlaBenchConfig {
  model::ModelConfig model;  // an MLA shape (mla_bench_shape)
  std::vector<int64_t> contexts{512, 4096};
  std::vector<int64_t> batch{1, 8};
  int iters = 5, warmup = 1;
  void validate() const;
};

// The attention of DeepSeek-V2-Lite (hidden 2048, 16 heads, no q_lora), DeepSeek-V3 (hidden 7168,
// 128 heads, q_lora 1536) or DeepSeek-V3.2 (V3's with DSA: 64 index heads of 128, top 2048); all a
// latent of 512, nope 128, rope 64, values 128. Usage error otherwise.
model::ModelConfig mla_bench_shape(const std::string& name, DType dtype);

struct MlaBenchRow {
  int64_t context, batch;
  double absorbed_s, expanded_s;  // median seconds per step (the whole batch); DSA shape: expanded_s is the sparse step's
  int64_t cache_bytes;  // the KV cache the dense step reads, all sequences (fp32 latent + RoPE key)
  // DSA shape: the attention's FLOPs and cache bytes per step, dense and sparse (0 otherwise).
  double dense_flops = 0, sparse_flops = 0, sparse_bytes = 0;
};

std::vector<MlaBenchRow> run_mla_bench(const MlaBenchConfig& cfg);
std::string mla_bench_table(const MlaBenchConfig& cfg, const std::vector<MlaBenchRow>& rows);
std::string mla_bench_json(const MlaBenchConfig& cfg, const std::vector<MlaBenchRow>& rows);

}  // namespace moerun::bench

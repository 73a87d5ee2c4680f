// The memory budget of a rank (issue 41): how much host memory it may use (--memory-budget, or by
// default what the cgroup limit and MemAvailable allow), and how it divides it. What the rank holds
// when the experts are placed (code, libraries, the dense part) is measured, the step buffers and
// the KV cache are reserved by formula, a margin is kept, and the rest goes to the experts: all of
// them resident when they fit, else as many L1 slots of the expert cache as fit.
#pragma once
#include <cstdint>
#include <string>

#include "base/quant_format.hpp"
#include "model/model_config.hpp"

namespace moerun::runtime {

struct MemoryBudget {
  int64_t bytes = 0;  // per rank; 0: none (no limit known)
  std::string source;  // what set it, for messages: "--memory-budget", "the cgroup memory limit", ...
  std::string clamped_from{};  // a warning when --memory-budget asked for more than the host allows
};

// What --memory-budget auto means: the tighter of the cgroup memory limit and MemAvailable, shared
// by the `ranks_on_host` ranks of this host.
MemoryBudget default_memory_budget(int ranks_on_host);
// The budget of a rank: `requested` (--memory-budget; 0: auto), or a node's `node` (--node-memory;
// 0: none) shared by the `ranks_on_host` ranks of the node, but never more than auto's: a budget
// above the cgroup limit or MemAvailable would be OOM-killed with no message, so it is clamped to
// that, with clamped_from saying so.
MemoryBudget resolve_memory_budget(int64_t requested, int ranks_on_host, int64_t node = 0);

// The vocabulary rows a step may hold under `budget` (a sixteenth of it at most, never fewer than
// `floor`), of the `rows` it would hold unbounded, each `copies` times; 0 (no cap) without a budget.
int64_t logit_rows_cap(const MemoryBudget& budget, int64_t vocab, int64_t rows, int64_t copies, int64_t floor);

// The slack kept inside a budget for what no formula counts: library code paged in while serving
// (measured: 36 MiB of oneDNN and OpenMP pages after the plan on the bench shape), allocator
// fragmentation, oneDNN scratch, MPI buffers.
int64_t budget_margin_bytes(int64_t budget);

struct ExpertMemoryNeeds {
  int64_t held = 0;  // resident now: code, libraries, the dense part when this rank has it
  int64_t reserved = 0;  // step buffers, KV cache and prefix cache that will be touched later
  int64_t cache_reserved = 0;  // what the expert cache adds when it is on: its I/O threads' buffers
  int64_t expert_bytes = 0;  // one expert in the backend's memory (an L1 slot)
  int64_t owned_experts = 0;
  int64_t min_slots = 1;  // the fewest L1 slots that can serve a token (top_k)
};

struct ExpertMemory {
  bool resident = true;  // every owned expert in memory (no cache)
  int64_t l1_bytes = 0;  // otherwise: the expert cache's L1
  int64_t room = 0;  // what the budget left for experts
};

// Memory the expert cache's loaders hold besides L1: per I/O thread its read and O_DIRECT bounce
// buffers (one expert each), its stack and oneDNN's per-thread state (measured: about 3 MiB each
// with 0.7 MiB experts, 1 to 8 threads, once freed buffers go back to the system under a budget);
// and one more read buffer, a load's handed to the thread that waits for it.
int64_t cache_loader_bytes(int io_threads, int64_t raw_expert_bytes);

// Usage error naming the budget, its source and every part when not even min_slots fit.
ExpertMemory split_for_experts(const MemoryBudget& budget, const ExpertMemoryNeeds& needs);
// The dense part's resident bytes once loaded, summed over the schema's rows (model/model_schema):
// matrices in the stored dtype, the rest in float32, less the embedding table when it is mapped (a
// local model), with --quantize-dense's matrices (LM head, multi-head attention) at their scheme's size. (A first --quantize-dense start reads them plain before quantizing: a higher peak.)
int64_t dense_resident_bytes(const model::ModelConfig& c, WeightScheme quantized, bool embedding_mapped);

// What a router reserves by formula: its step buffers for `step_tokens` tokens (and, in one process,
// the expert rows of those tokens), the KV cache of `kv_tokens` positions and the recurrent state of
// `sequences` sequences (linear-attention layers).
int64_t reserved_bytes(const model::ModelConfig& c, int64_t step_tokens, int64_t kv_tokens, int64_t sequences, bool one_process);

// The set-up line of a split ("memory budget 300 MiB (…): 77 MiB held, …").
std::string describe_split(const MemoryBudget& budget, const ExpertMemoryNeeds& needs, const ExpertMemory& m, const std::string& source);

// `moerun inspect --memory-budget`: how one process would divide `budget` before it starts, with
// kStartBytes standing in for the code, libraries and load-time state the engine measures (45-47 MiB
// besides the dense part on the bench shapes); the refusal it would print when nothing fits.
inline constexpr int64_t kStartBytes = int64_t{48} << 20;
std::string budget_plan_report(const model::ModelConfig& c, const MemoryBudget& budget, WeightScheme dense, int64_t step_tokens,
                               int64_t kv_tokens, int64_t sequences, int io_threads, int64_t expert_bytes, bool local);

// Before the dense part is read: Usage error naming the numbers when `dense_bytes` on top of what
// the rank holds now cannot fit the budget.
void check_dense_fits(const MemoryBudget& budget, int64_t dense_bytes, const std::string& model_file);

}  // namespace moerun::runtime

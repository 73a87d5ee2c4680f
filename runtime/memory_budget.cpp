// Dividing a rank's memory budget.
#include "runtime/memory_budget.hpp"

#include <algorithm>

#include "base/dtype.hpp"
#include "base/error.hpp"
#include "base/host.hpp"
#include "io/expert_shards.hpp"
#include "model/model_schema.hpp"
#include "runtime/model_forward.hpp"

namespace moerun::runtime {

namespace {
std::string mib(int64_t bytes) {
  return str(bytes >> 20, " MiB");
}
}  // namespace

MemoryBudget default_memory_budget(int ranks_on_host) {
  MemoryBudget b;
  const int64_t cgroup = cgroup_memory_limit_bytes(), available = available_memory_bytes() + resident_memory_bytes();
  if (cgroup > 0 && (available <= 0 || cgroup <= available)) {
    b.bytes = cgroup;
    b.source = "the cgroup memory limit";
  } else if (available > 0) {
    b.bytes = available;
    b.source = "MemAvailable";
  }
  b.bytes /= std::max(1, ranks_on_host);
  if (ranks_on_host > 1 && b.bytes > 0) b.source += str(" / ", ranks_on_host, " ranks on this host");
  return b;
}

MemoryBudget resolve_memory_budget(int64_t requested, int ranks_on_host, int64_t node) {
  MemoryBudget host = default_memory_budget(ranks_on_host);
  const int ranks = std::max(1, ranks_on_host);
  if (requested <= 0 && node <= 0) return host;
  MemoryBudget b{requested, "--memory-budget", ""};
  if (node > 0) b = {node / ranks, ranks > 1 ? str("--node-memory / ", ranks, " ranks on this node") : "--node-memory", ""};
  const std::string asked = node > 0 ? str("--node-memory ", mib(node)) : str("--memory-budget ", mib(requested));
  if (host.bytes > 0 && b.bytes > host.bytes) {
    b.clamped_from = str(asked, node > 0 && ranks > 1 ? str(" (", mib(b.bytes), " a rank)") : "", " is more than ", host.source,
                         " allows (", mib(host.bytes), "); using ", mib(host.bytes));
    b.bytes = host.bytes;
    b.source = "--memory-budget, clamped to " + host.source;
  }
  return b;
}

int64_t logit_rows_cap(const MemoryBudget& budget, int64_t vocab, int64_t rows, int64_t copies, int64_t floor) {
  if (budget.bytes <= 0 || rows <= 0) return 0;
  const int64_t row_bytes = std::max<int64_t>(1, vocab * copies * static_cast<int64_t>(sizeof(float)));
  return std::min(rows, std::max(floor, budget.bytes / 16 / row_bytes));
}

int64_t cache_loader_bytes(int io_threads, int64_t raw_expert_bytes) {
  return io_threads * ((int64_t{2} << 20) + 2 * raw_expert_bytes) + raw_expert_bytes;
}

int64_t budget_margin_bytes(int64_t budget) {
  return (int64_t{40} << 20) + budget / 20;
}

ExpertMemory split_for_experts(const MemoryBudget& budget, const ExpertMemoryNeeds& n) {
  ExpertMemory m;
  if (budget.bytes <= 0 || n.expert_bytes <= 0) return m;  // no limit known: resident, as before budgets
  m.room = budget.bytes - n.held - n.reserved - budget_margin_bytes(budget.bytes);
  if (m.room >= n.owned_experts * n.expert_bytes) return m;
  m.room -= n.cache_reserved;
  const int64_t slots = std::max<int64_t>(0, m.room) / n.expert_bytes;
  if (slots < std::min(n.min_slots, n.owned_experts))
    fail(ErrorKind::Usage, "the memory budget ", mib(budget.bytes), " (", budget.source, ") is too small: this rank holds ", mib(n.held),
         " (code, libraries, dense weights), reserves ", mib(n.reserved + n.cache_reserved),
         " for step buffers, the KV cache and the expert cache's I/O threads and ", mib(budget_margin_bytes(budget.bytes)),
         " of margin, which leaves ", mib(std::max<int64_t>(0, m.room)), " for experts; the expert cache needs at least ", n.min_slots,
         " experts of ", n.expert_bytes >> 10, " KiB (a smaller --max-batch-tokens reserves less)");
  m.resident = false;
  m.l1_bytes = slots * n.expert_bytes;
  return m;
}

int64_t dense_resident_bytes(const model::ModelConfig& c, WeightScheme quantized, bool embedding_mapped) {
  const auto dsize = static_cast<int64_t>(dtype_size(c.dtype));
  int64_t bytes = 0;
  for (const model::DenseDataset& ds : model::dense_datasets(c)) {
    if (ds.name == "embed_tokens" && embedding_mapped) continue;
    const int64_t cols = ds.shape.back();
    if (ds.quantizable && is_group_quantized(quantized) && cols % 32 == 0)  // values plus fp16 scales (and minimums) per group of 32
      bytes += ds.shape[0] * (quant_row_bytes(quantized, cols) + 2 * quant_row_scales(quantized, cols));
    else
      bytes += ds.elements() * (ds.matrix ? dsize : int64_t{4});  // the rest held widened to float32
  }
  return bytes;
}

int64_t reserved_bytes(const model::ModelConfig& c, int64_t step_tokens, int64_t kv_tokens, int64_t sequences, bool one_process) {
  const auto f = static_cast<int64_t>(sizeof(float));
  int64_t n = ModelForward::step_buffer_bytes(c, step_tokens) +
              kv_tokens * (c.num_layers - c.num_linear_layers()) * (c.kv_k_dim() + c.kv_v_dim()) * f;  // linear layers keep no rows
  n += sequences * c.num_linear_layers() * c.linear.state_bytes();
  if (one_process) n += 2 * step_tokens * c.top_k * c.hidden_size * f;  // the expert rows in and out
  return n;
}

std::string describe_split(const MemoryBudget& budget, const ExpertMemoryNeeds& n, const ExpertMemory& m, const std::string& source) {
  std::string s = str("memory budget ", mib(budget.bytes), " (", budget.source, "): ", mib(n.held), " held, ", mib(n.reserved),
                      " of step buffers and KV cache; the experts (", mib(n.owned_experts * n.expert_bytes), ")");
  if (m.resident) return s + " fit, all resident";
  return s + str(" do not fit, so ", mib(m.l1_bytes), " of them are cached in L1 and the rest read from ", source, " as needed");
}

std::string budget_plan_report(const model::ModelConfig& c, const MemoryBudget& budget, WeightScheme dense, int64_t step_tokens,
                               int64_t kv_tokens, int64_t sequences, int io_threads, int64_t expert_bytes, bool local) {
  ExpertMemoryNeeds n;
  n.held = kStartBytes + dense_resident_bytes(c, dense, local);
  n.reserved = reserved_bytes(c, step_tokens, kv_tokens, sequences, true);
  n.cache_reserved = cache_loader_bytes(io_threads, static_cast<int64_t>(io::expert_raw_bytes(c)));
  n.expert_bytes = expert_bytes;
  n.owned_experts = c.num_moe_layers() * c.num_experts;
  n.min_slots = c.top_k;
  std::string out = "one process under " + budget.source + ", before it starts (code, libraries and load-time state taken as " +
                    mib(kStartBytes) + " besides the dense part; the engine measures them):\n  ";
  try {
    const ExpertMemory m = split_for_experts(budget, n);
    out += describe_split(budget, n, m, "the model");
    if (!m.resident)
      out += str(" (", 100 * m.l1_bytes / std::max<int64_t>(1, n.owned_experts * n.expert_bytes), "% of them; margin ",
                 mib(budget_margin_bytes(budget.bytes)), ", I/O threads ", mib(n.cache_reserved), ")");
  } catch (const Error& e) {
    out += str("would not start: ", e.what());
  }
  return out + "\n";
}

void check_dense_fits(const MemoryBudget& budget, int64_t dense_bytes, const std::string& model_file) {
  if (budget.bytes <= 0) return;
  // More than the host has at all: the model file is at fault, and its reader says so (bad input).
  if (const int64_t host = host_memory_bytes(); host > 0 && dense_bytes > host) return;
  const int64_t held = resident_memory_bytes(), margin = budget_margin_bytes(budget.bytes);
  if (held + dense_bytes + margin > budget.bytes)
    fail(ErrorKind::Usage, "the memory budget ", mib(budget.bytes), " (", budget.source, ") is too small: ", model_file,
         ": the dense weights need ", mib(dense_bytes), " on top of the ", mib(held), " this process holds and ", mib(margin),
         " of margin");
}

}  // namespace moerun::runtime

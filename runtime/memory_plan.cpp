// Memory arithmetic for `inspect`.
#include "runtime/memory_plan.hpp"

#include <iomanip>
#include <sstream>

namespace moerun::runtime {
namespace {

std::string human(int64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) os << b / (1024.0 * 1024 * 1024) << " GiB";
  else if (b >= 1024.0 * 1024) os << b / (1024.0 * 1024) << " MiB";
  else os << b / 1024.0 << " KiB";
  return os.str();
}

}  // namespace

MemoryPlan plan_memory(const io::ModelConfig& c, const MemoryPlanConfig& p) {
  MemoryPlan m;
  const int64_t es = static_cast<int64_t>(dtype_size(c.dtype));
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  // Embeddings, norms and the gate are held as fp32; projections and LM head in the stored dtype.
  const int64_t fp32_elems = c.vocab_size * d + d + c.num_layers * (2 * d + c.num_experts * d);
  const int64_t stored_elems = c.vocab_size * d + c.num_layers * (q * d + 2 * kv * d + d * q);
  m.dense_bytes = fp32_elems * 4 + stored_elems * es;
  const int64_t context = p.context > 0 ? p.context : c.max_position;
  m.kv_bytes = p.batch * context * c.kv_bytes_per_token();
  const int64_t T = p.max_batch_tokens;
  m.activation_bytes = 4 * T * (4 * d + 2 * q + 2 * kv + c.num_experts) + 4 * p.batch * c.vocab_size;
  m.router_bytes = m.dense_bytes + m.kv_bytes + m.activation_bytes;
  const int64_t held = p.experts_per_rank > 0 ? p.experts_per_rank : c.num_layers * c.num_experts;
  m.expert_weight_bytes = held * c.bytes_per_expert();
  m.expert_scratch_bytes = 4 * T * c.top_k * (2 * d + 3 * c.intermediate_size);
  m.expert_rank_bytes = m.expert_weight_bytes + m.expert_scratch_bytes;
  return m;
}

std::string inspect_report(const io::ModelConfig& c, const MemoryPlanConfig& p, const std::string& model_dir) {
  const MemoryPlan m = plan_memory(c, p);
  std::ostringstream os;
  os << "model " << model_dir << " (moe-hdf5 v1, " << c.architecture << ", " << dtype_name(c.dtype) << ")\n";
  os << "  vocab_size " << c.vocab_size << ", hidden_size " << c.hidden_size << ", num_layers " << c.num_layers
     << ", num_heads " << c.num_heads << ", num_kv_heads " << c.num_kv_heads << ", head_dim " << c.head_dim << "\n";
  os << "  num_experts " << c.num_experts << ", top_k " << c.top_k << ", intermediate_size " << c.intermediate_size
     << ", max_position " << c.max_position << ", rope_theta " << c.rope_theta << ", rms_norm_eps " << c.rms_norm_eps
     << ", bos " << c.bos_token_id << ", eos " << c.eos_token_id << "\n";
  os << "parameters\n";
  os << "  total            " << c.total_params() << "\n";
  os << "  dense            " << c.dense_params() << "\n";
  os << "  experts          " << c.expert_params() << " (" << c.num_layers * c.num_experts << " experts of "
     << c.params_per_expert() << ")\n";
  os << std::fixed << std::setprecision(2);
  os << "  active per token " << c.active_params_per_token() << " ("
     << 100.0 * static_cast<double>(c.active_params_per_token()) / static_cast<double>(c.total_params()) << "% of all)\n";
  os << "bytes per expert   " << c.bytes_per_expert() << " (" << human(c.bytes_per_expert()) << ")\n";
  os << "KV cache per token " << c.kv_bytes_per_token() << " bytes\n";
  const int64_t context = p.context > 0 ? p.context : c.max_position;
  os << "router rank (batch " << p.batch << " x context " << context << ", " << p.max_batch_tokens << " tokens/step)\n";
  os << "  dense weights    " << human(m.dense_bytes) << "\n";
  os << "  KV cache         " << human(m.kv_bytes) << "\n";
  os << "  activations      " << human(m.activation_bytes) << "\n";
  os << "  total            " << human(m.router_bytes) << "\n";
  const int64_t held = p.experts_per_rank > 0 ? p.experts_per_rank : c.num_layers * c.num_experts;
  os << "expert rank holding " << held << " experts\n";
  os << "  expert weights   " << human(m.expert_weight_bytes) << "\n";
  os << "  scratch          " << human(m.expert_scratch_bytes) << "\n";
  os << "  total            " << human(m.expert_rank_bytes) << "\n";
  return os.str();
}

}  // namespace moerun::runtime

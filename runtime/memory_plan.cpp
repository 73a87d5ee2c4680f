// Memory arithmetic for `inspect`.
#include "runtime/memory_plan.hpp"

#include <algorithm>

#include <iomanip>
#include <sstream>

#include "base/weight_scheme_table.hpp"
#include "base/error.hpp"
#include "base/matmul.hpp"
#include "model/model_schema.hpp"
#include "runtime/moe_protocol.hpp"
#include "runtime/step_batch.hpp"

namespace moerun::runtime {
namespace {

std::string human(int64_t bytes) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(2);
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024)
    os << b / (1024.0 * 1024 * 1024) << " GiB";
  else if (b >= 1024.0 * 1024)
    os << b / (1024.0 * 1024) << " MiB";
  else
    os << b / 1024.0 << " KiB";
  return os.str();
}

}  // namespace

void MemoryPlanConfig::validate() const {
  if (batch < 1 || max_batch_tokens < 1 || micro_batches < 1)
    fail(ErrorKind::Usage, "--batch, --max-batch-tokens, --micro-batches must be >= 1");
  if (nodes < 1 || ranks_per_node < 1) fail(ErrorKind::Usage, "--nodes and --ranks-per-node must be >= 1");
  // Upper bounds keep the plan's arithmetic inside int64 (the KV cache is checked on its own).
  auto at_most = [](const char* option, int64_t v, int64_t limit) {
    if (v > limit) fail(ErrorKind::Usage, option, " is ", v, ", at most ", limit);
  };
  at_most("--batch", batch, int64_t{1} << 16);
  at_most("--context", context, model::kMaxPosition);
  at_most("--max-batch-tokens", max_batch_tokens, int64_t{1} << 20);
  at_most("--micro-batches", micro_batches, 256);
  at_most("--nodes", nodes, int64_t{1} << 12);
  at_most("--ranks-per-node", ranks_per_node, int64_t{1} << 10);
  at_most("--experts-per-rank", experts_per_rank, model::kMaxExpertTable);
  at_most("--device-bytes", device_bytes, int64_t{1} << 60);
  at_most("--node-memory", node_bytes, int64_t{1} << 60);
  if (context < 0 || experts_per_rank < 0) fail(ErrorKind::Usage, "--context and --experts-per-rank must be >= 0");
  if (nodes * ranks_per_node > 1 && (routers_per_node < 1 || routers_per_node >= ranks_per_node))
    fail(ErrorKind::Usage, "--routers-per-node must be in [1, --ranks-per-node) so that every node has expert ranks");
  if (device_bytes < 0 || !(margin >= 0)) fail(ErrorKind::Usage, "--device-bytes and the margin must be >= 0");
}

MemoryPlan plan_memory(const model::ModelConfig& c, const MemoryPlanConfig& p) {
  p.validate();
  MemoryPlan m;
  const int64_t es = static_cast<int64_t>(dtype_size(c.dtype));
  const int64_t d = c.hidden_size, q = c.num_heads * c.head_dim;
  const bool single = p.nodes * p.ranks_per_node == 1;
  m.routers = single ? 1 : p.nodes * p.routers_per_node;
  m.expert_ranks = single ? 1 : p.nodes * (p.ranks_per_node - p.routers_per_node);
  const int64_t all_experts = c.num_expert_slots();
  m.experts_per_rank = p.experts_per_rank > 0 ? p.experts_per_rank : (all_experts + m.expert_ranks - 1) / m.expert_ranks;
  // Router rank: the dense rows of the schema, matrices in the stored dtype (bf16 ones in float32
  // where Matmul widens them: no bf16 GEMM on this CPU) and the rest in float32.
  const int64_t ms = c.dtype == DType::BF16 && Matmul::bf16_widened() ? 4 : es;
  int64_t dense_bytes = 0;
  for (const model::DenseDataset& ds : model::dense_datasets(c)) dense_bytes += ds.elements() * (ds.matrix ? ms : 4);
  // MLA: the runtime holds kv_b split per head, its key half twice (as is and transposed).
  const bool mla = c.attention_type == model::AttentionType::Mla;
  const int64_t mla_split = mla ? c.num_heads * c.mla.qk_nope_head_dim * c.mla.kv_lora_rank : 0;
  m.dense_bytes = dense_bytes + c.num_layers * mla_split * ms;
  const int64_t context = p.context > 0 ? p.context : c.max_position;
  int64_t kv_cache = 0;
  if (__builtin_mul_overflow(p.batch, c.kv_bytes(context), &kv_cache) || kv_cache > (int64_t{1} << 60))
    fail(ErrorKind::Usage, "--batch ", p.batch, " x --context ", context, " needs a KV cache beyond 2^60 bytes");
  m.kv_bytes = kv_cache;
  const int64_t T = p.max_batch_tokens;
  // The router's own FFN scratch (gate, up, activation rows) for a shared expert or a dense layer.
  const int64_t router_ff = std::max(c.shared_expert_intermediate_size, c.num_dense_layers() > 0 ? c.dense_intermediate_size : int64_t{0});
  m.activation_bytes =
      4 * T * (4 * d + 2 * std::max(q, c.attention_out_dim()) + c.kv_k_dim() + c.kv_v_dim() + c.num_experts + 3 * router_ff) +
      4 * p.batch * c.vocab_size;
  // Bytes on the wire per routed row, out and back.
  const auto record = static_cast<int64_t>(MoeExchangeProtocol::dispatch_record_bytes(d)),
             result = static_cast<int64_t>(MoeExchangeProtocol::combine_record_bytes(d));
  m.router_exchange_bytes = single ? 0 : T * c.top_k * (record + result);
  const int64_t router_sum = m.dense_bytes + m.kv_bytes + m.activation_bytes + m.router_exchange_bytes;
  m.router_margin_bytes = static_cast<int64_t>(static_cast<double>(router_sum) * p.margin);
  m.router_bytes = router_sum + m.router_margin_bytes;
  // Expert rank.
  // Experts are held packed for the GEMMs (padding included) once a machine's layout is known.
  m.expert_weight_bytes = m.experts_per_rank * (p.packed_bytes_per_expert > 0 ? p.packed_bytes_per_expert : c.bytes_per_expert());
  m.expert_scratch_bytes = 4 * T * c.top_k * (2 * d + 3 * c.intermediate_size);
  m.expert_exchange_bytes = single ? 0 : (m.routers * T * c.top_k + m.expert_ranks - 1) / m.expert_ranks * (record + result);
  const int64_t expert_sum = m.expert_weight_bytes + m.expert_scratch_bytes + m.expert_exchange_bytes;
  m.expert_margin_bytes = static_cast<int64_t>(static_cast<double>(expert_sum) * p.margin);
  m.expert_rank_bytes = expert_sum + m.expert_margin_bytes;
  if (single) m.router_bytes += m.expert_rank_bytes;  // one process holds both
  if (p.device_bytes > 0) {
    m.router_fits = m.router_bytes <= p.device_bytes;
    m.expert_fits = single || m.expert_rank_bytes <= p.device_bytes;
  }
  m.node_total_bytes =
      single ? m.router_bytes : p.routers_per_node * m.router_bytes + (p.ranks_per_node - p.routers_per_node) * m.expert_rank_bytes;
  if (p.node_bytes > 0) m.node_fits = m.node_total_bytes <= p.node_bytes;
  // Between nodes: with uniform placement a row goes to another node with probability (nodes-1)/nodes.
  const double remote = static_cast<double>(p.nodes - 1) / static_cast<double>(p.nodes);
  m.cross_node_bytes_per_token = static_cast<double>(c.top_k * (record + result)) * remote;
  const int64_t expert_ranks_per_node = p.ranks_per_node - p.routers_per_node;
  const int64_t mbs = step_micro_batches(p.micro_batches, p.batch > 1);  // a decode step's
  m.flat_messages_per_step = single ? 0 : 2 * mbs * m.routers * (p.nodes - 1) * expert_ranks_per_node;
  m.hier_messages_per_step = single ? 0 : 2 * mbs * p.nodes * (p.nodes - 1);
  return m;
}

int64_t nodes_needed(const model::ModelConfig& c, const MemoryPlanConfig& p) {
  if (p.node_bytes <= 0 || p.ranks_per_node < 2) return 0;
  MemoryPlanConfig q = p;
  q.experts_per_rank = 0;  // spread over the layout's expert ranks
  for (q.nodes = 1; q.nodes <= 4096; ++q.nodes)
    if (plan_memory(c, q).node_total_bytes <= p.node_bytes) return q.nodes;
  return 0;
}

namespace {
// The config's variants, a line each where the model has them.
void describe_variants(std::ostream& os, const model::ModelConfig& c) {
  if (c.architecture != "mixtral")
    os << "  norm_topk_prob " << c.norm_topk_prob << ", shared_expert_intermediate_size " << c.shared_expert_intermediate_size
       << ", attention_bias " << c.attention_bias << ", qk_norm " << static_cast<int64_t>(c.qk_norm) << "\n";
  if (c.rotary_dim > 0) os << "  partial RoPE: the first " << c.rotary_dim << " of each head's " << c.head_dim << " dims rotated\n";
  if (const int64_t n = c.num_linear_layers(); n > 0) {
    const model::LinearAttentionShape& s = c.linear;
    os << "  Gated DeltaNet layers " << n << " of " << c.num_layers << " (" << s.k_heads << " key heads of " << s.k_dim << ", " << s.v_heads
       << " value heads of " << s.v_dim << ", conv " << s.conv_kernel << "): a recurrent state of " << human(n * s.state_bytes())
       << " per sequence in place of their KV cache\n";
  }
  if (c.attention_output_gate || c.norm_weight_offset != 0)
    os << "  attention output gate " << c.attention_output_gate << ", norm weights + " << c.norm_weight_offset << "\n";
  if (c.num_dense_layers() > 0)
    os << "  dense MLP layers " << c.num_dense_layers() << " of " << c.num_layers << " (width " << c.dense_intermediate_size << "; "
       << c.num_moe_layers() << " MoE layers hold the experts)\n";
  if (c.attention_out_bias || c.attention_sinks || c.sliding_window > 0 || c.rope.type != model::RopeType::Default || c.router_bias ||
      c.expert_bias)
    os << "  attention_out_bias " << c.attention_out_bias << ", sinks " << c.attention_sinks << ", sliding_window " << c.sliding_window
       << " (" << std::count(c.layer_attention.begin(), c.layer_attention.end(), model::AttentionKind::Sliding) << " of " << c.num_layers
       << " layers), rope " << model::rope_type_name(c.rope.type) << " x" << c.rope.factor << ", router_bias " << c.router_bias
       << ", router "
       << (c.router_scoring == model::RouterScoring::TopKSoftmax ? "topk_softmax"
           : c.router_scoring == model::RouterScoring::Sigmoid   ? "sigmoid"
                                                                 : "softmax_topk")
       << ", expert_bias " << c.expert_bias << ", expert activation "
       << (c.expert_activation == model::ExpertActivation::ClampedSwiGlu ? "swiglu_clamped" : "swiglu") << "\n";
  if (c.attention_type == model::AttentionType::Mla)
    os << "  attention mla: q_lora_rank " << c.mla.q_lora_rank << ", kv_lora_rank " << c.mla.kv_lora_rank << ", qk_nope_head_dim "
       << c.mla.qk_nope_head_dim << ", qk_rope_head_dim " << c.mla.qk_rope_head_dim << ", v_head_dim " << c.mla.v_head_dim
       << "; the KV cache holds " << c.kv_k_dim()
       << " values a token and layer (multi-head attention of these heads: " << c.num_heads * (c.head_dim + c.mla.v_head_dim) << ")\n";
  if (c.is_dsa()) {
    int64_t shared = 0;
    for (int64_t l = 0; l < c.num_layers; ++l) shared += c.dsa.shared(l);
    os << "  sparse attention (DSA): each query attends its top " << c.dsa.index_topk << " positions by an indexer of " << c.dsa.index_heads
       << " heads of " << c.dsa.index_head_dim << " (its key is " << c.dsa.index_head_dim << " of the cache row's values)";
    if (shared > 0) os << "; " << shared << " layer(s) share the choice of the full layer before them";
    os << "\n";
  }
  if (c.router_groups > 1 || c.router_correction_bias || c.routed_scaling_factor != 1.0 ||
      c.router_scoring == model::RouterScoring::Sigmoid || (c.shared_expert_intermediate_size > 0 && !c.shared_expert_gated))
    os << "  routing: " << (c.router_scoring == model::RouterScoring::Sigmoid ? "sigmoid" : "softmax") << " scores"
       << (c.router_correction_bias ? " with a correction bias" : "") << ", " << c.router_groups << " group(s), best "
       << c.router_topk_groups << " kept (by their " << (c.router_group_score == model::GroupScore::Top2Sum ? "best two" : "best") << ")"
       << ", weights " << (c.norm_topk_prob ? "renormalised" : "as they are") << " x " << c.routed_scaling_factor
       << (c.shared_expert_intermediate_size > 0 ? c.shared_expert_gated ? "; a gated shared expert" : "; shared experts, ungated" : "")
       << "\n";
}

// Sequences of `context` that fit the device bytes beside the rest of the router's plan (the margin
// on top of everything, as plan_memory adds it).
int64_t sequences_that_fit(const model::ModelConfig& c, const MemoryPlanConfig& p, const MemoryPlan& m, int64_t context) {
  const int64_t per_sequence = c.kv_bytes(context);
  const double room = static_cast<double>(p.device_bytes) / (1.0 + p.margin) -
                      static_cast<double>(m.dense_bytes + m.activation_bytes + m.router_exchange_bytes);
  return room > 0 && per_sequence > 0 ? static_cast<int64_t>(room / static_cast<double>(per_sequence)) : 0;
}
}  // namespace

std::string inspect_report(const model::ModelConfig& c, const MemoryPlanConfig& p, const std::string& model_dir) {
  const MemoryPlan m = plan_memory(c, p);
  std::ostringstream os;
  os << "model " << model_dir << " (moe-hdf5 v" << c.format_version << ", " << c.architecture << ", " << dtype_name(c.dtype);
  if (c.expert_format.scheme != WeightScheme::Plain) os << ", experts " << c.expert_format.name();
  os << ")\n";
  if (c.expert_format.scheme != WeightScheme::Plain) {
    const WeightSchemeRow& r = weight_scheme_row(c.expert_format.scheme);
    os << "  experts as " << r.name << ": " << r.what << ", " << r.bits_per_weight << " bits per weight\n";
  }
  os << "  vocab_size " << c.vocab_size << ", hidden_size " << c.hidden_size << ", num_layers " << c.num_layers << ", num_heads "
     << c.num_heads << ", num_kv_heads " << c.num_kv_heads << ", head_dim " << c.head_dim << "\n";
  os << "  num_experts " << c.num_experts << ", top_k " << c.top_k << ", intermediate_size " << c.intermediate_size << ", max_position "
     << c.max_position << ", rope_theta " << c.rope_theta << ", rms_norm_eps " << c.rms_norm_eps << ", bos " << c.bos_token_id << ", eos "
     << c.eos_token_id;
  for (int64_t t : c.extra_eos_token_ids) os << "," << t;
  os << "\n";
  describe_variants(os, c);
  os << "parameters\n";
  os << "  total            " << c.total_params() << "\n";
  os << "  dense            " << c.dense_params() << "\n";
  os << "  experts          " << c.expert_params() << " (" << c.num_expert_slots() << " experts of " << c.params_per_expert() << ")\n";
  os << std::fixed << std::setprecision(2);
  os << "  active per token " << c.active_params_per_token() << " ("
     << 100.0 * static_cast<double>(c.active_params_per_token()) / static_cast<double>(c.total_params()) << "% of all; "
     << c.active_params_per_token() - c.vocab_size * c.hidden_size << " without the embedding table, a lookup)\n";
  os << "bytes per expert   " << c.bytes_per_expert() << " (" << human(c.bytes_per_expert()) << ") as stored";
  if (p.packed_bytes_per_expert > 0)
    os << ", " << p.packed_bytes_per_expert << " (" << human(p.packed_bytes_per_expert)
       << ") packed in memory on this machine (an L1 slot: what --l1-bytes counts)";
  os << "\n";
  // What the same experts take in each stored format (convert --quantize, synth --dtype): the
  // packed CPU forms of the quantized formats are these bytes too (plus padding rows to 16), so an
  // L1 of the same bytes holds that many more.
  os << "  at each format   ";
  const char* sep = "";
  for (const std::string& name : model::weight_format_names()) {
    model::ModelConfig f = c;
    f.dtype = name == "float32" ? DType::F32 : DType::BF16;
    f.expert_format = model::parse_weight_format(name, f.dtype, "inspect");
    const bool whole = c.hidden_size % kQuantGroup == 0 && c.intermediate_size % kQuantGroup == 0;
    if (f.expert_format.scheme != WeightScheme::Plain && !whole) continue;  // quantized formats need whole groups of 32
    os << sep << name << " " << human(f.bytes_per_expert());
    sep = ", ";
  }
  os << " per expert (stored)\n";
  os << "KV cache per token " << c.kv_bytes_per_token() << " bytes";
  if (c.sliding_window > 0 && c.kv_bytes(c.max_position) < c.kv_bytes_per_token() * c.max_position)
    os << " (sliding layers hold at most 2 x " << c.sliding_window << " positions: " << human(c.kv_bytes(c.max_position))
       << " per sequence at max_position " << c.max_position << ")";
  os << "\n";
  const int64_t context = p.context > 0 ? p.context : c.max_position;
  os << "layout: " << p.nodes << " node(s) x " << p.ranks_per_node << " rank(s), " << m.routers << " router rank(s), " << m.expert_ranks
     << " expert rank(s), " << m.experts_per_rank << " experts per expert rank\n";
  auto fits = [&](bool ok) { return p.device_bytes > 0 ? (ok ? "  fits" : "  DOES NOT FIT") : ""; };
  os << "router rank (batch " << p.batch << " x context " << context << ", " << p.max_batch_tokens << " tokens/step)\n";
  os << "  dense weights    " << human(m.dense_bytes);
  if (c.dtype == DType::BF16 && Matmul::bf16_widened())
    os << " (bf16 matrices held as float32: this CPU has no bf16 GEMM in oneDNN, below AVX-512; --quantize-dense keeps them small)";
  os << "\n";
  os << "  KV cache         " << human(m.kv_bytes);
  if (p.device_bytes > 0)
    os << " (" << human(c.kv_bytes(context)) << " a sequence" << (c.num_linear_layers() > 0 ? ", recurrent state included" : "") << ": "
       << sequences_that_fit(c, p, m, context) << " sequences of this context fit the device bytes beside the rest)";
  os << "\n";
  os << "  activations      " << human(m.activation_bytes) << "\n";
  os << "  exchange buffers " << human(m.router_exchange_bytes) << "\n";
  os << "  margin " << static_cast<int>(p.margin * 100) << "%       " << human(m.router_margin_bytes) << "\n";
  os << "  total            " << human(m.router_bytes) << (p.nodes * p.ranks_per_node == 1 ? " (one process: experts included)" : "")
     << fits(m.router_fits) << "\n";
  os << "expert rank holding " << m.experts_per_rank << " experts\n";
  os << "  expert weights   " << human(m.expert_weight_bytes) << "\n";
  os << "  scratch          " << human(m.expert_scratch_bytes) << "\n";
  os << "  exchange buffers " << human(m.expert_exchange_bytes) << "\n";
  os << "  margin " << static_cast<int>(p.margin * 100) << "%       " << human(m.expert_margin_bytes) << "\n";
  os << "  total            " << human(m.expert_rank_bytes) << fits(m.expert_fits) << "\n";
  if (p.device_bytes > 0) os << "device memory per rank " << human(p.device_bytes) << "\n";
  if (p.node_bytes > 0) {
    os << "per node (" << human(p.node_bytes) << ")\n";
    os << "  "
       << (p.nodes * p.ranks_per_node == 1 ? "one process"
                                           : std::to_string(p.routers_per_node) + " router rank(s) + " +
                                                 std::to_string(p.ranks_per_node - p.routers_per_node) + " expert rank(s)")
       << ": " << human(m.node_total_bytes) << (m.node_fits ? "  fits" : "  DOES NOT FIT") << "\n";
    if (p.ranks_per_node < 2) {
      os << "  nodes needed: give --ranks-per-node 2 or more (a router and expert ranks a node) to plan them\n";
    } else if (const int64_t k = nodes_needed(c, p); k > 0) {
      os << "  nodes needed to hold every expert in memory (no disk reads): " << k << " of " << p.ranks_per_node << " ranks ("
         << p.routers_per_node << " router(s)); fewer nodes stream the rest from each node's disk (--l1-bytes, --l2-dir)\n";
    } else {
      os << "  nodes needed: no count up to 4096 holds it (a router rank alone takes " << human(m.router_bytes)
         << "; lower --batch or --context)\n";
    }
  }
  os << "between nodes (uniform placement)\n";
  os << "  bytes per token  " << std::setprecision(0) << m.cross_node_bytes_per_token << " (flat and hierarchical alike)\n";
  os << "  messages / step  flat " << m.flat_messages_per_step << ", hierarchical " << m.hier_messages_per_step << "\n";
  return os.str();
}

}  // namespace moerun::runtime

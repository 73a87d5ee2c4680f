// Resume keys: xxh64 fingerprints of requests, model bytes and routing options.
#include "runtime/resume_keys.hpp"

#include "base/xxh64.hpp"

#include <cstdio>

namespace moerun::runtime {
namespace {

void hash_matrix(Xxh64& h, const WeightMatrix& m) {
  // A quantized matrix (--quantize-dense) is hashed in its blocked form.
  h.value(m.rows).value(m.cols).bytes(m.data.data(), m.scheme == WeightScheme::Plain ? m.bytes() : m.data.size());
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

uint64_t dense_fingerprint(const io::DenseWeights& w) {
  Xxh64 h;
  const model::ModelConfig& c = w.config;
  h.text(c.architecture);
  for (int64_t v : {c.vocab_size,
                    c.hidden_size,
                    c.num_layers,
                    c.num_heads,
                    c.num_kv_heads,
                    c.head_dim,
                    c.intermediate_size,
                    c.num_experts,
                    c.top_k,
                    c.max_position,
                    c.bos_token_id,
                    c.eos_token_id,
                    static_cast<int64_t>(c.dtype),
                    int64_t{c.norm_topk_prob},
                    c.shared_expert_intermediate_size,
                    int64_t{c.attention_bias},
                    static_cast<int64_t>(c.qk_norm),
                    int64_t{c.attention_out_bias},
                    int64_t{c.attention_sinks},
                    c.sliding_window,
                    int64_t{c.router_bias},
                    static_cast<int64_t>(c.router_scoring),
                    int64_t{c.expert_bias},
                    static_cast<int64_t>(c.expert_activation),
                    static_cast<int64_t>(c.rope.type),
                    c.rope.original_max_position,
                    int64_t{c.rope.truncate},
                    c.dense_intermediate_size})
    h.value(v);
  for (double v : {c.rope.factor, c.rope.beta_fast, c.rope.beta_slow, c.rope.attention_factor, c.rope.mscale, c.rope.mscale_all_dim,
                   c.rope.low_freq_factor, c.rope.high_freq_factor, c.swiglu_alpha, c.swiglu_limit})
    h.value(v);
  for (int64_t t : c.extra_eos_token_ids) h.value(t);
  for (model::AttentionKind k : c.layer_attention) h.value(static_cast<int64_t>(k));
  for (model::MlpKind k : c.layer_mlp) h.value(static_cast<int64_t>(k));
  h.value(c.rope_theta);
  h.value(c.rms_norm_eps);
  h.value(w.embed_tokens.rows).value(w.embed_tokens.cols).value(w.embed_tokens.xxh64);
  h.vec(w.final_norm);
  hash_matrix(h, w.lm_head);
  // Every layer tensor in schema order, its name first (so that no two layouts hash alike).
  for (const io::LayerTensors& l : w.layers)
    for (const auto& [name, t] : l.items()) {
      h.bytes(name.data(), name.size());
      if (const auto* v = std::get_if<std::vector<float>>(&t))
        h.vec(*v);
      else
        hash_matrix(h, std::get<WeightMatrix>(t));
    }
  return h.digest();
}

uint64_t experts_fingerprint(const io::ExpertShardIndex& index, const model::ModelConfig& c) {
  Xxh64 h;
  for (int64_t l = 0; l < c.num_moe_layers(); ++l)
    for (int64_t e = 0; e < c.num_experts; ++e) h.value(index.checksum(l, e));
  return h.digest();
}

uint64_t routing_fingerprint(const router::RouterConfig& r) {
  Xxh64 h;
  h.value(r.capacity_factor_prefill);
  h.value(r.capacity_factor_decode);
  h.value(r.top_p_experts);
  h.value(static_cast<int>(r.overflow));
  h.value(r.load_penalty);
  h.value(r.temperature);
  return h.digest();
}

uint64_t combine_fingerprints(const std::vector<uint64_t>& parts) {
  Xxh64 h;
  h.vec(parts);
  return h.digest();
}

io::JournalKeys journal_keys(const std::vector<io::Request>& requests, uint64_t run_fingerprint) {
  io::JournalKeys keys;
  keys.reserve(requests.size());
  const std::string run = hex(run_fingerprint);
  for (const io::Request& r : requests) keys[r.id] = hex(io::request_fingerprint(r)) + "-" + run;
  return keys;
}

}  // namespace moerun::runtime

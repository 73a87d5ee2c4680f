// Synthetic model generation.
#include "convert/synthetic_model.hpp"

#include "model/model_family.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>

#include "base/error.hpp"
#include "base/splitmix64.hpp"
#include "io/expert_shards.hpp"
#include "model/model_family.hpp"
#include "io/model_file.hpp"
#include "io/output_file.hpp"

namespace moerun::convert {
namespace {

uint64_t next(uint64_t& s) {
  const uint64_t z = splitmix64(s);
  s += kSplitmix64Gamma;
  return z;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// A gate whose logits favour a seeded ranking of experts per layer and topic (different hot experts
// per layer), as a bias along the topic's direction.
std::vector<float> skewed_gate(const SynthConfig& cfg, const model::DenseDataset& ds, const std::vector<std::vector<float>>& dirs) {
  const model::ModelConfig& c = cfg.model;
  const int64_t d = c.hidden_size, topics = static_cast<int64_t>(dirs.size());
  const std::string& p = ds.path.substr(0, ds.path.size() - ds.name.size());
  std::vector<float> g = synth_tensor(cfg.seed, ds.path, c.num_experts * d, 1.0f / std::sqrt(static_cast<float>(d)));
  for (int64_t t = 0; t < topics; ++t) {
    std::vector<int64_t> order(static_cast<std::size_t>(c.num_experts));
    for (int64_t e = 0; e < c.num_experts; ++e) order[static_cast<std::size_t>(e)] = e;
    std::vector<float> key =
        synth_tensor(cfg.seed, cfg.gate_topics > 0 ? p + "gate_rank/" + std::to_string(t) : p + "gate_rank", c.num_experts, 1.0f);
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return key[static_cast<std::size_t>(a)] < key[static_cast<std::size_t>(b)]; });
    const std::vector<float>& dir = dirs[static_cast<std::size_t>(t)];
    for (int64_t r = 0; r < c.num_experts; ++r) {
      const float bias = static_cast<float>(-cfg.gate_skew * std::log(static_cast<double>(r + 1)));
      const int64_t e = order[static_cast<std::size_t>(r)];
      for (int64_t i = 0; i < d; ++i) g[static_cast<std::size_t>(e * d + i)] += 0.3f * bias * dir[static_cast<std::size_t>(i)];
    }
  }
  return g;
}

// Norm weights near 1, biases and sinks small, matrices scaled by 1/sqrt(fan_in): activations stay
// O(1) through the layers.
bool is_norm(const model::DenseDataset& ds) {
  return ds.name.size() >= 4 && ds.name.compare(ds.name.size() - 4, 4, "norm") == 0;
}
float synth_offset(const model::DenseDataset& ds) {
  return is_norm(ds) ? 1.0f : 0.0f;
}
float synth_scale(const model::DenseDataset& ds) {
  if (is_norm(ds)) return 0.05f;
  if (ds.shape.size() == 1) return ds.name == "sinks" ? 1.0f : 0.1f;  // biases, sinks
  return 1.0f / std::sqrt(static_cast<float>(ds.shape[1]));
}

}  // namespace

void apply_family(const std::string& family, model::ModelConfig& m) {
  const model::ModelFamily* f = model::find_model_family(family);
  if (!f) fail(ErrorKind::Usage, "--family \"", family, "\" is not one of ", model::supported_architectures());
  m.architecture = family;
  m.norm_topk_prob = false;
  f->synth(m);
}

void SynthConfig::validate() const {
  model.validate("synth");
  if (gate_topics < 0 || gate_topics > model.vocab_size)
    fail(ErrorKind::Usage, "--gate-topics must be in [0, vocab size ", model.vocab_size, "], not ", gate_topics);
  if (!(gate_skew >= 0 && gate_skew <= 100)) fail(ErrorKind::Usage, "--gate-skew must be in [0, 100], not ", gate_skew);
  if (gate_topics > 0 && !(gate_skew > 0)) fail(ErrorKind::Usage, "--gate-topics needs --gate-skew > 0");
  if (shards < 1) fail(ErrorKind::Usage, "--shards must be >= 1");
  if (shards > model.num_expert_slots())
    fail(ErrorKind::Usage, "--shards ", shards, " exceeds the number of experts (", model.num_expert_slots(), ")");
}

std::vector<float> synth_tensor(uint64_t seed, const std::string& name, int64_t count, float scale, float offset) {
  std::vector<float> out(static_cast<std::size_t>(count));
  uint64_t s = seed * kSplitmix64Gamma ^ fnv1a(name);
  for (int64_t i = 0; i < count; i += 2) {
    const double u1 = (static_cast<double>(next(s) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(next(s) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = offset + scale * static_cast<float>(r * std::cos(2 * M_PI * u2));
    if (i + 1 < count) out[i + 1] = offset + scale * static_cast<float>(r * std::sin(2 * M_PI * u2));
  }
  return out;
}

namespace {
// Skew directions: one shared by every token, or one per topic (none without skew).
std::vector<std::vector<float>> skew_directions(const SynthConfig& cfg) {
  const int64_t topics = cfg.gate_skew > 0 ? std::max<int64_t>(cfg.gate_topics, 1) : 0;
  std::vector<std::vector<float>> dirs;
  for (int64_t t = 0; t < topics; ++t) {
    std::vector<float> dir = synth_tensor(cfg.seed, cfg.gate_topics > 0 ? "/topic_direction/" + std::to_string(t) : "/skew_direction",
                                          cfg.model.hidden_size, 1.0f);
    double norm = 0;
    for (float x : dir) norm += static_cast<double>(x) * x;
    for (float& x : dir) x = static_cast<float>(x / std::sqrt(norm));
    dirs.push_back(std::move(dir));
  }
  return dirs;
}

// Adds `amount` times its topic's direction to each row v of a [vocab, d] table (a token's topic is
// its share of the vocabulary).
void lean_rows(std::vector<float>& table, const SynthConfig& cfg, const std::vector<std::vector<float>>& dirs, float amount) {
  const int64_t d = cfg.model.hidden_size, vocab = cfg.model.vocab_size, topics = static_cast<int64_t>(dirs.size());
  for (int64_t v = 0; v < vocab; ++v) {
    const std::vector<float>& dir = dirs[static_cast<std::size_t>(v * topics / vocab)];
    for (int64_t i = 0; i < d; ++i) table[static_cast<std::size_t>(v * d + i)] += amount * dir[static_cast<std::size_t>(i)];
  }
}

// One dense dataset's values, drawn by its path. With skew the embedding rows carry their topic's
// direction (as large as a row's random part, so it survives RMSNorm), the gates favour a ranking
// along it, and with topics the LM head leans each token's row towards its topic (a logit lift of a
// few units), so that generated tokens stay in the prompt's topic.
std::vector<float> synth_dataset(const SynthConfig& cfg, const model::DenseDataset& ds, const std::vector<std::vector<float>>& dirs) {
  const float d = static_cast<float>(cfg.model.hidden_size);
  if (ds.name == "embed_tokens") {
    std::vector<float> t = synth_tensor(cfg.seed, ds.path, ds.elements(), 1.0f);
    if (!dirs.empty()) lean_rows(t, cfg, dirs, std::sqrt(d) * 0.5f);
    return t;
  }
  if (ds.name == "gate" && !dirs.empty()) return skewed_gate(cfg, ds, dirs);
  std::vector<float> t = synth_tensor(cfg.seed, ds.path, ds.elements(), synth_scale(ds), synth_offset(ds));
  if (ds.name == "lm_head" && cfg.gate_topics > 0) lean_rows(t, cfg, dirs, 8.0f / std::sqrt(d));
  return t;
}

// Expert shards: contiguous runs of the flattened (layer, expert) order per shard.
void write_synthetic_shards(const std::string& dir, const SynthConfig& cfg, bool quiet) {
  const model::ModelConfig& c = cfg.model;
  const int64_t d = c.hidden_size, ff = c.intermediate_size, total = c.num_expert_slots();
  const float sd = 1.0f / std::sqrt(static_cast<float>(d));
  for (int s = 0; s < cfg.shards; ++s) {
    const int64_t begin = total * s / cfg.shards, end = total * (s + 1) / cfg.shards;
    const std::string path = dir + "/" + io::shard_file_name(s);
    io::AtomicFile out(path);
    io::ExpertShardWriter w(out.temp_path(), c, path);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t l = i / c.num_experts, e = i % c.num_experts;
      const std::string p = io::expert_group_path(l, e);
      auto w1 = synth_tensor(cfg.seed, p + "/w1", ff * d, sd);
      auto w3 = synth_tensor(cfg.seed, p + "/w3", ff * d, sd);
      auto w2 = synth_tensor(cfg.seed, p + "/w2", d * ff, 1.0f / std::sqrt(static_cast<float>(ff)));
      const auto bias = c.expert_bias ? synth_tensor(cfg.seed, p + "/bias", c.expert_bias_params(), 0.1f) : std::vector<float>{};
      w.write(l, e, w1.data(), w3.data(), w2.data(), c.expert_bias ? bias.data() : nullptr);
    }
    w.close();
    out.commit();
    if (!quiet)
      std::fprintf(stderr, "moerun synth: wrote shard %d/%d (%lld experts)\n", s + 1, cfg.shards, static_cast<long long>(end - begin));
  }
}
}  // namespace

void write_synthetic_model(const std::string& dir, const SynthConfig& cfg, bool quiet) {
  cfg.validate();
  const model::ModelConfig& c = cfg.model;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(ErrorKind::Io, dir, ": cannot create directory: ", ec.message());
  if (cfg.config_only) {
    io::AtomicFile out(io::model_h5_path(dir));
    io::ModelFileWriter w(out.temp_path(), c, io::model_h5_path(dir));
    w.set_shard_identities({});  // no shards to bind
    w.close();
    out.commit();
    return;
  }
  write_synthetic_shards(dir, cfg, quiet);
  // model.h5 last, binding the shards just written (their identities, in name order).
  const io::ExpertShardIndex shards = io::ExpertShardIndex::build(dir, c);
  io::AtomicFile out(io::model_h5_path(dir));
  io::ModelFileWriter w(out.temp_path(), c, io::model_h5_path(dir));
  w.set_attr("num_expert_shards", cfg.shards);
  w.set_shard_identities(shards.shard_identities());
  const std::vector<std::vector<float>> dirs = skew_directions(cfg);
  for (const model::DenseDataset& ds : model::dense_datasets(c)) w.write(ds, synth_dataset(cfg, ds, dirs).data());
  w.close();
  out.commit();
}

}  // namespace moerun::convert

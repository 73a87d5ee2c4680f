// Multi-head latent attention on a real (tiny, synthetic DeepSeek-V3) model file in one process:
// the absorbed form (decode's: attention over the compressed cache) and the expanded form (per-head
// keys and values) give the same logits to float rounding, for a prefill long enough that auto
// picks the expanded form and for decode steps after it; the cache holds only the latent and the
// RoPE key (kv_lora_rank + qk_rope_head_dim per token and layer, no V); decoding token by token
// agrees with the prefill. The numbers themselves are checked against transformers and a float64
// forward in tests/reference (hf_2025_reference, numpy_reference).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/model_forward.hpp"
#include "tests/runtime/local_model.hpp"

namespace moerun::runtime {
namespace {

// A tiny DeepSeek-V3: heads 4 of nope 16 + rope 8 (latent 32), 8 experts in 4 groups, 3 layers
// (the first dense).
convert::SynthConfig tiny_deepseek() {
  convert::SynthConfig s = moerun::testing::tiny_synth_config(2);
  s.model.hidden_size = 64;
  s.model.num_heads = 4;
  s.model.head_dim = 24;
  s.model.intermediate_size = 32;
  s.model.num_layers = 3;
  s.model.num_experts = 8;
  s.model.vocab_size = 96;
  convert::apply_family("deepseek_v3", s.model);
  return s;
}

class MlaForward : public ::testing::Test {
 protected:
  MlaForward() : m_("mla", tiny_deepseek()), mc_(m_.config) {}

  StepBatch chunk(const std::vector<int32_t>& ids, int64_t pos0, KvCache* kv) {
    StepBatch b;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      b.ids.push_back(ids[i]);
      b.positions.push_back(static_cast<int32_t>(pos0 + static_cast<int64_t>(i)));
      b.is_prefill.push_back(ids.size() > 1);
      b.request.push_back(0);
    }
    b.chunks.push_back({kv, 0, static_cast<int64_t>(ids.size()), pos0, true, nullptr});
    return b;
  }
  KvCache fresh_cache() { return m_.fresh_cache(64); }
  // A 40-token prompt in one chunk, then `steps` greedy decode steps: each step's logits.
  std::vector<std::vector<float>> generate(MlaMode mode, KvCache& kv, int steps) {
    ModelForward f(m_.fresh_dense(), m_.mm, *m_.moe, {}, 1, mode);
    std::vector<int32_t> prompt;
    for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<int32_t>((7 * i + 3) % mc_.vocab_size));
    std::vector<std::vector<float>> out(1);
    f.forward(chunk(prompt, 0, &kv), out[0], nullptr);
    int64_t pos = static_cast<int64_t>(prompt.size());
    for (int s = 0; s < steps; ++s) {
      const auto& last = out.back();
      const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
      out.emplace_back();
      f.forward(chunk({next}, pos++, &kv), out.back(), nullptr);
    }
    return out;
  }

  moerun::testing::LocalModel m_;
  const model::ModelConfig& mc_;
};

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, scale = 0;
  for (float v : b) scale = std::max(scale, std::fabs(double(v)));
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])) / scale);
  return worst;
}

TEST_F(MlaForward, AbsorbedAndExpandedFormsAgree) {
  ASSERT_EQ(mc_.attention_type, model::AttentionType::Mla);
  KvCache a = fresh_cache(), e = fresh_cache(), x = fresh_cache();
  const auto absorbed = generate(MlaMode::Absorbed, a, 6);
  const auto expanded = generate(MlaMode::Expanded, e, 6);
  const auto automatic = generate(MlaMode::Auto, x, 6);  // the 40-token prefill expanded, the steps absorbed
  ASSERT_EQ(absorbed.size(), 7u);
  for (std::size_t s = 0; s < absorbed.size(); ++s) {
    EXPECT_LT(max_rel_diff(absorbed[s], expanded[s]), 1e-5) << "step " << s;
    EXPECT_LT(max_rel_diff(automatic[s], expanded[s]), 1e-5) << "step " << s;
  }
  EXPECT_GT(max_rel_diff(absorbed[0], absorbed[1]), 1e-3) << "steps with the same logits: nothing computed";
}

TEST_F(MlaForward, TheCacheHoldsOnlyTheLatentAndTheRopeKey) {
  KvCache kv = fresh_cache();
  generate(MlaMode::Absorbed, kv, 4);
  const int64_t row = mc_.mla.kv_lora_rank + mc_.mla.qk_rope_head_dim;
  EXPECT_EQ(kv.row_state(0).k_dim, row);
  EXPECT_EQ(kv.row_state(0).v_dim, 0);
  for (int64_t l = 0; l < mc_.num_layers; ++l) {
    EXPECT_EQ(static_cast<int64_t>(kv.row_state(l).k.size()), 44 * row) << "layer " << l;
    EXPECT_TRUE(kv.row_state(l).v.empty()) << "layer " << l;
  }
  // Against multi-head attention of the same heads, H * (nope + rope) keys and H * v values a token:
  // 40 values against 4 * (24 + 16) = 160 here (576 against 40,960 at DeepSeek-V3's sizes).
  EXPECT_EQ(mc_.kv_bytes_per_token(), mc_.num_layers * row * 4);
  EXPECT_EQ(row * 4, mc_.num_heads * (mc_.head_dim + mc_.mla.v_head_dim));
}

TEST_F(MlaForward, DecodingTokenByTokenAgreesWithPrefill) {
  const std::vector<int32_t> prompt{1, 6, 2, 9, 5, 11, 3};
  KvCache whole = fresh_cache(), steps = fresh_cache();
  std::vector<float> at_once, last;
  ModelForward f(m_.fresh_dense(), m_.mm, *m_.moe, {}, 1, MlaMode::Expanded);
  f.forward(chunk(prompt, 0, &whole), at_once, nullptr);
  ModelForward g(m_.fresh_dense(), m_.mm, *m_.moe, {}, 1, MlaMode::Absorbed);
  for (std::size_t i = 0; i < prompt.size(); ++i) g.forward(chunk({prompt[i]}, static_cast<int64_t>(i), &steps), last, nullptr);
  EXPECT_LT(max_rel_diff(last, at_once), 1e-5);
}

}  // namespace
}  // namespace moerun::runtime

// ModelForward on a real (tiny, synthetic) model file in one process: micro-batches change the
// logits only by rounding; two sequences batched give each one's logits alone; a prompt prefilled at
// once and the same prompt decoded token by token agree. The blocks take every layer tensor, and a
// tensor no block takes is refused.
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.hpp"

#include "runtime/model_forward.hpp"
#include "tests/runtime/local_model.hpp"

namespace moerun::runtime {
namespace {

class ModelForwardTest : public ::testing::Test {
 protected:
  ModelForwardTest() : m_("forward", moerun::testing::tiny_synth_config(2)), mc_(m_.config) {}

  // A batch of sequences given as (tokens, first position, emit) chunks, each with its own cache.
  StepBatch batch(const std::vector<std::vector<int32_t>>& seqs, const std::vector<int64_t>& pos0, std::vector<KvCache*> caches) {
    StepBatch b;
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      SeqChunk c{caches[s], b.tokens(), static_cast<int64_t>(seqs[s].size()), pos0[s], true, nullptr};
      for (std::size_t i = 0; i < seqs[s].size(); ++i) {
        b.ids.push_back(seqs[s][i]);
        b.positions.push_back(static_cast<int32_t>(pos0[s] + static_cast<int64_t>(i)));
        b.is_prefill.push_back(1);
        b.request.push_back(static_cast<int64_t>(s));
      }
      b.chunks.push_back(c);
    }
    return b;
  }
  KvCache fresh_cache() { return m_.fresh_cache(16); }
  std::vector<float> run(int micro_batches, const StepBatch& b) {
    ModelForward f(m_.fresh_dense(), m_.mm, *m_.moe, {}, micro_batches);
    std::vector<float> logits;
    f.forward(b, logits, nullptr);
    return logits;
  }

  moerun::testing::LocalModel m_;
  const model::ModelConfig& mc_;
};

double max_rel_diff(const float* a, const float* b, int64_t n) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n; ++i) scale = std::max(scale, std::fabs(double(b[i])));
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])) / scale);
  return worst;
}

// Micro-batches split the step's rows, so the dense GEMMs run at other row counts (other kernels):
// the logits agree to rounding, and the experts' rows are the same.
TEST_F(ModelForwardTest, MicroBatchesChangeOnlyRounding) {
  const std::vector<std::vector<int32_t>> seqs{{1, 5, 9, 3}, {2, 7}, {4, 4, 8}};
  std::vector<std::vector<float>> out;
  for (int m : {1, 2, 3}) {
    std::vector<KvCache> kv{fresh_cache(), fresh_cache(), fresh_cache()};
    out.push_back(run(m, batch(seqs, {0, 0, 0}, {&kv[0], &kv[1], &kv[2]})));
  }
  ASSERT_EQ(out[0].size(), static_cast<std::size_t>(3 * mc_.vocab_size));
  for (int m : {1, 2})
    for (int64_t s = 0; s < 3; ++s)
      EXPECT_LT(max_rel_diff(out[m].data() + s * mc_.vocab_size, out[0].data() + s * mc_.vocab_size, mc_.vocab_size), 1e-5)
          << m + 1 << " micro-batches, sequence " << s;
}

TEST_F(ModelForwardTest, BatchedSequencesGiveTheirLogitsAlone) {
  KvCache a = fresh_cache(), b = fresh_cache(), a1 = fresh_cache(), b1 = fresh_cache();
  const auto both = run(1, batch({{1, 5, 9}, {2, 7, 3, 3}}, {0, 0}, {&a, &b}));
  const auto alone_a = run(1, batch({{1, 5, 9}}, {0}, {&a1}));
  const auto alone_b = run(1, batch({{2, 7, 3, 3}}, {0}, {&b1}));
  const int64_t V = mc_.vocab_size;
  EXPECT_LT(max_rel_diff(both.data(), alone_a.data(), V), 1e-5);
  EXPECT_LT(max_rel_diff(both.data() + V, alone_b.data(), V), 1e-5);
  EXPECT_GT(max_rel_diff(alone_a.data(), alone_b.data(), V), 1e-3) << "different prompts, same logits: nothing computed";
}

TEST_F(ModelForwardTest, DecodingTokenByTokenAgreesWithPrefill) {
  const std::vector<int32_t> prompt{1, 6, 2, 9, 5};
  KvCache whole = fresh_cache(), steps = fresh_cache();
  const auto at_once = run(1, batch({prompt}, {0}, {&whole}));
  std::vector<float> last;
  ModelForward f(m_.fresh_dense(), m_.mm, *m_.moe, {}, 1);
  for (std::size_t i = 0; i < prompt.size(); ++i) f.forward(batch({{prompt[i]}}, {static_cast<int64_t>(i)}, {&steps}), last, nullptr);
  EXPECT_EQ(whole.length(0), static_cast<int64_t>(prompt.size()));
  EXPECT_EQ(steps.length(0), static_cast<int64_t>(prompt.size()));
  EXPECT_LT(max_rel_diff(last.data(), at_once.data(), mc_.vocab_size), 1e-4);
}

TEST_F(ModelForwardTest, BlocksTakeEveryLayerTensor) {
  io::DenseWeights& w = m_.fresh_dense();
  ASSERT_FALSE(w.layers[0].all_taken());
  ModelForward f(w, m_.mm, *m_.moe, {}, 1);
  for (const io::LayerTensors& l : w.layers) EXPECT_TRUE(l.all_taken());
  EXPECT_EQ(w.lm_head.rows, mc_.vocab_size) << "the model-wide tensors stay with the weights";
}

TEST_F(ModelForwardTest, ATensorNoBlockTakesIsRefused) {
  io::DenseWeights& w = m_.fresh_dense();
  model::DenseDataset extra{"/layers/1/extra", "extra", 1, {4}};
  std::get<std::vector<float>>(w.layers[1].place(extra)).assign(4, 1.0f);
  try {
    ModelForward f(w, m_.mm, *m_.moe, {}, 1);
    FAIL() << "a layer tensor no block takes was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1 has tensors that no block takes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moerun::runtime

// The Job of `moerun perplexity`: a text (or its token ids) scored by the model in windows, as
// llama.cpp's llama-perplexity does, on an Engine under mpirun or in one process. Each window is a
// prefill-only request whose second half is scored; the windows are split among the routers like
// any requests. Optionally the full-vocabulary log-probs of every scored position are saved
// (--save-logits, io/logprob_file.hpp) or compared with a saved base run (--kl-base): KL
// divergence, top-1 agreement and the perplexity ratio, as llama-perplexity --kl-divergence.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <mpi.h>

#include "io/tokenizer.hpp"
#include "runtime/engine.hpp"
#include "runtime/scheduler.hpp"

namespace moerun::runtime {

// Windows of `context` tokens every `stride` tokens over a text of `tokens` tokens (only whole
// windows). Window k covers [k·stride, k·stride + context) and scores the tokens from local index
// first_target = max(context / 2, context - stride) on, each predicted from the logits before it:
// with stride = context (the default) the second half of each window, as llama-perplexity; with
// stride <= context / 2 every token from first_target on exactly once.
struct WindowPlan {
  int64_t context = 0, stride = 0;
  int64_t windows = 0;
  int64_t first_target = 0;

  int64_t per_window() const { return context - first_target; }
  int64_t scored() const { return windows * per_window(); }
  int64_t start(int64_t k) const { return k * stride; }
};
// Usage error naming the option when the text is shorter than one window.
WindowPlan plan_windows(int64_t tokens, int64_t context, int64_t stride);

struct PerplexityConfig {
  EngineConfig engine;
  std::string text;  // UTF-8 text, tokenized by the model directory's tokenizer
  std::string tokens;  // or: a JSON array of token ids
  int64_t context = 512;
  int64_t stride = 0;  // 0: context
  std::string json_out;  // optional
  std::string save_logits;  // optional: moe-logprobs file (router N > 0 writes FILE.N)
  std::string kl_base;  // optional: a saved moe-logprobs run to compare against
  SchedulerConfig scheduler;
  io::TokenizerConfig tokenizer;
  bool quiet = false;
  std::function<std::string(const std::string& field)> option_name;

  void validate() const;  // ConfigError naming the field
};

struct KlReport {
  int64_t tokens = 0;
  double mean = 0, median = 0, p99 = 0, max = 0;
  double mean_stderr = 0;
  double top1 = 0;  // fraction of positions where both argmaxes agree
  double base_perplexity = 0;
  double perplexity_ratio = 0;  // ours / base
};

struct PerplexityReport {
  double perplexity = 0;
  double stderr_ = 0;  // of the perplexity (delta method on the mean negative log-likelihood)
  double nll = 0;  // mean negative log-likelihood, nats
  int64_t tokens = 0;  // scored
  int64_t processed = 0;  // tokens through the model (windows x context)
  WindowPlan plan;
  double seconds = 0;  // the batch loop
  bool kl_on = false;
  KlReport kl;
};

PerplexityReport run_perplexity(const PerplexityConfig& cfg, MPI_Comm world);

// Mean, standard error and perplexity of negative log-likelihoods; KL statistics of per-position
// divergences (rank 0's summary; public for the unit test).
void summarize_nll(const std::vector<double>& nll, PerplexityReport& rep);
KlReport summarize_kl(const std::vector<double>& kld, const std::vector<double>& top1, const std::vector<double>& base_nll,
                      double perplexity);

}  // namespace moerun::runtime

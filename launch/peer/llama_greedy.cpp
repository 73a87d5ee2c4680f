// Greedy decoding with llama.cpp on token ids, for the side-by-side check of launch/bench-peer.sh:
// the same requests as moerun's must give the same tokens (computed in f32 throughout, KV cache
// included). Reads "ID MAX_NEW TOKEN..." lines on
// stdin, prints "ID TOKEN..." (generated tokens, ending with EOS when it came).
// Built against the llama.cpp of the llama-cpp-python source package; not part of moerun.
// usage: llama_greedy MODEL.gguf THREADS < requests
#include <llama.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: llama_greedy MODEL.gguf THREADS < requests\n");
    return 2;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) {
    std::fprintf(stderr, "llama_greedy: cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const llama_token eos = llama_vocab_eos(vocab);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 4096;
  cp.n_batch = 4096;
  cp.n_threads = cp.n_threads_batch = std::atoi(argv[2]);
  // f32 attention, as moerun's: llama.cpp's default f16 KV cache and its CPU flash attention round
  // to about 1e-3 (measured: first-step logits 1.6e-4 apart, 1e-2 after 17 tokens, a greedy choice
  // flipped; without them 1e-6), which the benchmark keeps as llama.cpp's defaults.
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string id;
    int max_new = 0;
    in >> id >> max_new;
    std::vector<llama_token> prompt;
    for (llama_token t; in >> t;) prompt.push_back(t);
    llama_memory_clear(llama_get_memory(ctx), true);
    if (llama_decode(ctx, llama_batch_get_one(prompt.data(), static_cast<int32_t>(prompt.size()))) != 0) return 1;
    std::printf("%s", id.c_str());
    for (int i = 0; i < max_new; ++i) {
      const float* logits = llama_get_logits_ith(ctx, -1);
      llama_token best = 0;
      for (int v = 1; v < n_vocab; ++v)
        if (logits[v] > logits[best]) best = v;  // ties to the lower id, as moerun
      std::printf(" %d", best);
      if (best == eos) break;
      if (llama_decode(ctx, llama_batch_get_one(&best, 1)) != 0) return 1;
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}

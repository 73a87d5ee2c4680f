// The peers' side of launch/bench-offload.sh and launch/bench-peer.sh: N sequences decoded greedily
// at once on token ids, with llama.cpp or ik_llama.cpp (this file builds against both; -DPEER_IK
// for the latter), as moerun decodes its requests. llama-batched-bench feeds token 0 at every
// position, so its routing repeats from step to step and the experts a step needs stay in the page
// cache: under a memory limit it measures a workload no user runs. Here each sequence has its own prompt and its own
// generated tokens, so the experts change as they do for moerun.
// Reads one prompt per line (token ids) on stdin; prints
// "prefill_tokens prefill_s decode_tokens decode_s" (decode: NEW steps of all sequences).
// usage: peer_decode MODEL.gguf THREADS NEW [rtr] [no-fmoe] [no-repack] [rpc=HOST:PORT,...] [split=W1,W2,...]
//        [ngl=K] < prompts
// (rtr, no-fmoe: ik_llama.cpp's -rtr, run-time repacking with no mmap, and -no-fmoe. rpc=: llama.cpp
// or ik_llama.cpp built with GGML_RPC (-DPEER_RPC), every layer on those rpc-servers, split by their
// free memory, as llama-cli's --rpc SERVERS -ngl 99 does; split=: the servers' shares instead, as
// its --tensor-split; ngl=K: only the last K layers on the servers, the rest on this process's CPU
// from the mapped file, as -ngl K; no-repack: llama.cpp's --no-repack, which keeps those layers in
// the mapped file's pages rather than copies repacked into anonymous memory; launch/bench-cluster.sh.)
// Built against the peers' static libraries by launch/peer/build_peers.sh; not part of moerun.
#include <llama.h>
#ifdef PEER_RPC
#include <ggml-backend.h>
#include <ggml-rpc.h>
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void add(llama_batch& b, llama_token t, llama_pos pos, llama_seq_id seq, bool logits) {
  b.token[b.n_tokens] = t;
  b.pos[b.n_tokens] = pos;
  b.n_seq_id[b.n_tokens] = 1;
  b.seq_id[b.n_tokens][0] = seq;
  b.logits[b.n_tokens] = logits;
  ++b.n_tokens;
}

// "a,b,c" -> {"a", "b", "c"}; "" -> {}.
[[maybe_unused]] std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t at = 0; !s.empty() && at != std::string::npos;) {
    const std::size_t comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    at = comma == std::string::npos ? comma : comma + 1;
  }
  return out;
}

llama_token argmax(const float* logits, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: peer_decode MODEL.gguf THREADS NEW [rtr] [no-fmoe] < prompts\n");
    return 2;
  }
  bool rtr = false, no_fmoe = false, no_repack = false;
  std::string rpc, split;
  int ngl = 999;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    rtr |= a == "rtr";
    no_fmoe |= a == "no-fmoe";
    no_repack |= a == "no-repack";
    if (a.rfind("rpc=", 0) == 0)
      rpc = a.substr(4);
    else if (a.rfind("split=", 0) == 0)
      split = a.substr(6);
    else if (a.rfind("ngl=", 0) == 0)
      ngl = std::atoi(a.c_str() + 4);
    else if (a != "rtr" && a != "no-fmoe" && a != "no-repack") {
      std::fprintf(stderr, "peer_decode: unknown option %s (rtr, no-fmoe, no-repack, rpc=SERVERS, split=SHARES, ngl=K)\n", argv[i]);
      return 2;
    }
  }
#ifndef PEER_RPC
  if (!rpc.empty() || !split.empty() || ngl != 999) {
    std::fprintf(stderr, "peer_decode: rpc=, split= and ngl= need a build with GGML_RPC (build_llama_rpc, build_ik_rpc)\n");
    return 2;
  }
#endif
#ifndef PEER_IK
  if (rtr || no_fmoe) {
    std::fprintf(stderr, "peer_decode: rtr and no-fmoe are ik_llama.cpp's options\n");
    return 2;
  }
#else
  if (no_repack) {
    std::fprintf(stderr, "peer_decode: no-repack is llama.cpp's option (ik_llama.cpp repacks only with rtr)\n");
    return 2;
  }
#endif
  const int threads = std::atoi(argv[2]), steps = std::atoi(argv[3]);
  std::vector<std::vector<llama_token>> prompts;
  for (std::string line; std::getline(std::cin, line);) {
    std::istringstream in(line);
    std::vector<llama_token> p;
    for (llama_token t; in >> t;) p.push_back(t);
    if (!p.empty()) prompts.push_back(p);
  }
  const int n = static_cast<int>(prompts.size());
  int total = 0;
  for (const auto& p : prompts) total += static_cast<int>(p.size());
  if (n == 0 || steps <= 0) {
    std::fprintf(stderr, "peer_decode: no prompts, or NEW <= 0\n");
    return 2;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
#ifndef PEER_IK
  mp.use_extra_bufts = !no_repack;
#endif
#ifdef PEER_IK
  mp.repack_tensors = rtr;  // as its -rtr: repack at load, which needs the weights read, not mapped
  if (rtr) mp.use_mmap = false;
#endif
#ifdef PEER_RPC
  std::vector<float> shares(llama_max_devices(), 0.0f);
  const std::vector<std::string> share_list = comma_list(split);
  for (std::size_t d = 0; d < share_list.size() && d < shares.size(); ++d) shares[d] = std::strtof(share_list[d].c_str(), nullptr);
#ifdef PEER_IK
  // ik_llama.cpp takes the servers as llama.cpp did before its device registry: one string, each
  // server's devices as HOST:PORT|DEVICE (as its common/ --rpc writes them).
  std::string ik_devices;
  for (const std::string& server : comma_list(rpc))
    for (uint32_t d = 0; d < ggml_backend_rpc_get_device_count(server.c_str()); ++d)
      ik_devices += (ik_devices.empty() ? "" : ",") + server + "|" + std::to_string(d);
  if (!rpc.empty()) {
    mp.rpc_servers = ik_devices.c_str();
    mp.n_gpu_layers = ngl;
    if (!split.empty()) mp.tensor_split = shares.data();
  }
#else
  std::vector<ggml_backend_dev_t> devices;  // null-terminated: the servers' devices only
  for (const std::string& server : comma_list(rpc)) {
    ggml_backend_reg_t reg = ggml_backend_rpc_add_server(server.c_str());
    if (!reg) return 1;
    ggml_backend_register(reg);
    for (std::size_t d = 0; d < ggml_backend_reg_dev_count(reg); ++d) devices.push_back(ggml_backend_reg_dev_get(reg, d));
  }
  if (!devices.empty()) {
    devices.push_back(nullptr);
    mp.devices = devices.data();
    mp.n_gpu_layers = ngl;
    if (!split.empty()) mp.tensor_split = shares.data();
  }
#endif
#endif
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(total + n * steps + 64);
  cp.n_batch = 2048;
  cp.n_ubatch = 512;
  cp.n_seq_max = static_cast<uint32_t>(n);
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
#ifdef PEER_IK
  cp.fused_moe_up_gate = !no_fmoe;
  cp.flash_attn = n == 1;  // its FlashAttention asserts (iqk_fa_templates.h: S > 0) with several sequences
#endif
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  // Prefill: every prompt, in batches of up to n_batch tokens; logits of each prompt's last token.
  std::vector<llama_token> next(static_cast<std::size_t>(n));
  llama_batch b = llama_batch_init(2048, 0, 1);
  double t0 = now();
  std::vector<std::pair<int, int>> want;  // (sequence, index in the batch) of the logits to read
  auto flush = [&] {
    if (b.n_tokens == 0) return;
    if (llama_decode(ctx, b) != 0) std::exit(1);
    for (auto [s, i] : want) next[static_cast<std::size_t>(s)] = argmax(llama_get_logits_ith(ctx, i), vocab);
    want.clear();
    b.n_tokens = 0;
  };
  for (int s = 0; s < n; ++s)
    for (std::size_t i = 0; i < prompts[static_cast<std::size_t>(s)].size(); ++i) {
      if (b.n_tokens == 2048) flush();
      const bool last = i + 1 == prompts[static_cast<std::size_t>(s)].size();
      if (last) want.push_back({s, b.n_tokens});
      add(b, prompts[static_cast<std::size_t>(s)][i], static_cast<llama_pos>(i), s, last);
    }
  flush();
  const double prefill = now() - t0;

  // Decode: one token of every sequence per step, each its own greedy choice.
  t0 = now();
  for (int step = 0; step < steps; ++step) {
    for (int s = 0; s < n; ++s) {
      want.push_back({s, b.n_tokens});
      add(b, next[static_cast<std::size_t>(s)], static_cast<llama_pos>(prompts[static_cast<std::size_t>(s)].size() + step), s, true);
    }
    flush();
  }
  const double decode = now() - t0;
  std::printf("%d %.6f %d %.6f\n", total, prefill, n * steps, decode);
  llama_batch_free(b);
  llama_free(ctx);
  llama_backend_free();
  return 0;
}

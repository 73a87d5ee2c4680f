#!/usr/bin/env python3
"""A moe-hdf5 model (Mixtral or Qwen3-MoE architecture) as a GGUF file for llama.cpp, for the
side-by-side benchmark (launch/bench-peer.sh). The weights are the same bytes: float32 stays
float32, bfloat16 stays bfloat16 (GGUF BF16). As llama.cpp's own converter does:
- Mixtral: architecture "llama" with n_expert / n_expert_used, q and k rows permuted from the
  rotate_half RoPE convention (ours, Hugging Face's) to llama.cpp's interleaved one;
- Qwen3-MoE: architecture "qwen3moe" (NEOX RoPE, rotate_half: no permutation), per-head q/k norms
  attn_{q,k}_norm, expert_feed_forward_length, top-k weights renormalised (norm_topk_prob);
- Qwen3.5-MoE: architecture "qwen35moe": Gated DeltaNet layers as ssm_* tensors (conv [channels, K],
  ssm_a = -exp(A_log), the value heads reordered from grouped by key head to tiled, as llama.cpp's
  converter does), the full layers' q and gate re-interleaved per head into attn_q, the (1 + w)
  norms stored as w + 1 (not the gated DeltaNet norm), its text positions on IMRoPE sections;
- experts stacked per layer into ffn_{gate,up,down}_exps [E, ...].

The vocabulary is a placeholder ("<t0>", "<t1>", ...): the benchmark feeds token ids, never text,
except that ids 3-258 are SentencePiece byte tokens (<0x00>...), so that llama-perplexity can
tokenize a text (every byte one token) for the quality comparison; the ids it picks are read back
from its logits file and given to moerun.

usage: moe_to_gguf.py MODEL_DIR OUT.gguf   (needs numpy, h5py, and gguf-py on PYTHONPATH)
"""
import sys

if sys.argv[1:2] in (["-h"], ["--help"]):  # the docstring is the usage; nothing runs
    print(__doc__)
    sys.exit(0)
import glob
import os

import h5py
import numpy as np
import gguf


def attr(a, k):
    v = a[k]
    return v.decode() if isinstance(v, bytes) else (v.item() if hasattr(v, "item") else v)


def permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def add_hybrid_parameters(w, a):
    """Qwen3.5-MoE's keys: the shared expert, the DeltaNet shape, which layers are recurrent, IMRoPE sections."""
    w.add_expert_shared_feed_forward_length(int(attr(a, "shared_expert_intermediate_size")))
    kh, vh, kd, vd = (int(attr(a, n)) for n in ("linear_k_heads", "linear_v_heads", "linear_k_dim", "linear_v_dim"))
    if kd != vd:
        sys.exit("moe_to_gguf: llama.cpp's qwen35moe takes equal key and value head dims")
    w.add_ssm_conv_kernel(int(attr(a, "linear_conv_kernel")))
    w.add_ssm_state_size(kd)
    w.add_ssm_group_count(kh)
    w.add_ssm_time_step_rank(vh)
    w.add_ssm_inner_size(vd * vh)
    w.add_recurrent_layers([t == "linear" for t in attr(a, "layer_types").split(",")])
    half = int(attr(a, "rotary_dim")) // 2  # text positions: every section turns by the same position
    w.add_rope_dimension_sections([half - 2 * (half // 3), half // 3, half // 3, 0])


def tiled_v_heads(x, axis, k_heads, v_heads, width):
    """Value heads grouped by key head [G0 v0..v(r-1), G1 ...] to llama.cpp's tiled [G0 v0, G1 v0, ...]."""
    if k_heads == v_heads:
        return x
    x = np.moveaxis(x, axis, 0)
    shape = x.shape
    x = x.reshape(k_heads, v_heads // k_heads, width, *shape[1:]).swapaxes(0, 1).reshape(shape)
    return np.moveaxis(x, 0, axis)


def put_hybrid_layers(a, mf, put, vec):
    """The decoder layers of a qwen3_5_moe model, as llama.cpp's converter writes Qwen3.5-MoE's."""
    H, hd, d = attr(a, "num_heads"), attr(a, "head_dim"), attr(a, "hidden_size")
    kh, vh, kd, vd = (int(attr(a, n)) for n in ("linear_k_heads", "linear_v_heads", "linear_k_dim", "linear_v_dim"))
    kinds = attr(a, "layer_types").split(",")
    for l, kind in enumerate(kinds):
        g = mf[f"layers/{l}"]
        p = f"blk.{l}."
        put(p + "attn_norm.weight", vec(g["attn_norm"]) + 1.0, stored=False)
        put(p + "post_attention_norm.weight", vec(g["ffn_norm"]) + 1.0, stored=False)
        if kind == "linear":
            qkv = g["linear/w_qkv"][()]
            put(p + "attn_qkv.weight", np.concatenate([qkv[:2 * kh * kd], tiled_v_heads(qkv[2 * kh * kd:], 0, kh, vh, vd)]))
            put(p + "attn_gate.weight", tiled_v_heads(g["linear/w_z"][()], 0, kh, vh, vd))
            put(p + "ssm_beta.weight", tiled_v_heads(g["linear/w_b"][()], 0, kh, vh, 1))
            put(p + "ssm_alpha.weight", tiled_v_heads(g["linear/w_a"][()], 0, kh, vh, 1))
            conv = g["linear/conv"][()].astype(np.float32)
            put(p + "ssm_conv1d.weight", np.concatenate([conv[:2 * kh * kd], tiled_v_heads(conv[2 * kh * kd:], 0, kh, vh, vd)]), stored=False)
            put(p + "ssm_dt.bias", tiled_v_heads(g["linear/dt_bias"][()].astype(np.float32), 0, kh, vh, 1), stored=False)
            put(p + "ssm_a", tiled_v_heads(-np.exp(g["linear/A_log"][()].astype(np.float32)), 0, kh, vh, 1), stored=False)
            put(p + "ssm_norm.weight", vec(g["linear/norm"]), stored=False)
            put(p + "ssm_out.weight", tiled_v_heads(g["wo"][()], 1, kh, vh, vd))
        else:
            q, gate = g["wq"][()], g["wq_gate"][()]  # per head: its query rows, then its gate rows
            put(p + "attn_q.weight", np.concatenate([q.reshape(H, hd, d), gate.reshape(H, hd, d)], axis=1).reshape(2 * H * hd, d))
            put(p + "attn_k.weight", g["wk"][()])
            put(p + "attn_v.weight", g["wv"][()])
            put(p + "attn_output.weight", g["wo"][()])
            put(p + "attn_q_norm.weight", vec(g["q_norm"]) + 1.0, stored=False)
            put(p + "attn_k_norm.weight", vec(g["k_norm"]) + 1.0, stored=False)
        put(p + "ffn_gate_inp.weight", vec(g["gate"]), stored=False)
        put(p + "ffn_gate_inp_shexp.weight", vec(g["shared_expert_gate"]).reshape(-1), stored=False)
        put(p + "ffn_gate_shexp.weight", g["shared_expert/w1"][()])
        put(p + "ffn_up_shexp.weight", g["shared_expert/w3"][()])
        put(p + "ffn_down_shexp.weight", g["shared_expert/w2"][()])


def main():
    model_dir, out = sys.argv[1], sys.argv[2]
    mf = h5py.File(os.path.join(model_dir, "model.h5"), "r")
    a = mf.attrs
    arch = attr(a, "architecture")
    if arch not in ("mixtral", "qwen3_moe", "qwen3_5_moe"):
        sys.exit(f"moe_to_gguf: {model_dir}: architecture {arch}: only mixtral, qwen3_moe and qwen3_5_moe models map to llama.cpp here")
    hybrid = arch == "qwen3_5_moe"
    qwen3 = arch == "qwen3_moe"
    if qwen3 and (attr(a, "qk_norm") != 2 or attr(a, "norm_topk_prob") != 1 or "layer_mlp" in a or attr(a, "sliding_window")):
        sys.exit(f"moe_to_gguf: {model_dir}: a qwen3_moe model maps to llama.cpp's qwen3moe with per-head q/k norms, "
                 "norm_topk_prob, no dense layers and no window")
    V, d, L = attr(a, "vocab_size"), attr(a, "hidden_size"), attr(a, "num_layers")
    H, KV, hd = attr(a, "num_heads"), attr(a, "num_kv_heads"), attr(a, "head_dim")
    ff, E, k = attr(a, "intermediate_size"), attr(a, "num_experts"), attr(a, "top_k")
    bf16 = attr(a, "dtype") == "bfloat16"
    qtype = gguf.GGMLQuantizationType.BF16 if bf16 else gguf.GGMLQuantizationType.F32

    w = gguf.GGUFWriter(out, "qwen35moe" if hybrid else "qwen3moe" if qwen3 else "llama")
    w.add_context_length(int(attr(a, "max_position")))
    w.add_embedding_length(int(d))
    w.add_block_count(int(L))
    w.add_feed_forward_length(int(ff))
    w.add_head_count(int(H))
    w.add_head_count_kv(int(KV))
    w.add_key_length(int(hd))
    w.add_value_length(int(hd))
    w.add_rope_dimension_count(int(attr(a, "rotary_dim")) if hybrid else int(hd))
    w.add_rope_freq_base(float(attr(a, "rope_theta")))
    w.add_layer_norm_rms_eps(float(attr(a, "rms_norm_eps")))
    w.add_expert_count(int(E))
    w.add_expert_used_count(int(k))
    if qwen3 or hybrid:
        w.add_expert_feed_forward_length(int(ff))
    if hybrid:
        add_hybrid_parameters(w, a)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if bf16 else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    byte_ids = range(3, 259) if V >= 259 else range(0)
    w.add_token_list([(f"<0x{i - 3:02X}>" if i in byte_ids else f"<t{i}>").encode() for i in range(V)])
    w.add_token_scores([0.0] * V)
    types = [gguf.TokenType.BYTE if i in byte_ids else gguf.TokenType.NORMAL for i in range(V)]
    bos, eos = int(attr(a, "bos_token_id")), int(attr(a, "eos_token_id"))
    types[bos] = types[eos] = gguf.TokenType.CONTROL
    w.add_token_types(types)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_add_bos_token(False)

    def put(name, arr, stored=True):
        """Matrices in the model's dtype (as stored: uint16 bits for bf16); norms and the gate f32."""
        arr = np.ascontiguousarray(arr)
        if stored and bf16:
            w.add_tensor(name, arr.astype(np.uint16), raw_shape=arr.shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(name, arr.astype(np.float32) if arr.dtype != np.uint16 else bf16_to_f32(arr))

    def bf16_to_f32(bits):
        return (bits.astype(np.uint32) << 16).view(np.float32)

    def vec(ds):  # norms and the gate: llama.cpp computes them in f32
        v = ds[()]
        return bf16_to_f32(v) if v.dtype == np.uint16 else v.astype(np.float32)

    put("token_embd.weight", mf["embed_tokens"][()])
    put("output_norm.weight", vec(mf["final_norm"]) + (1.0 if hybrid else 0.0), stored=False)
    put("output.weight", mf["lm_head"][()])
    if hybrid:
        put_hybrid_layers(a, mf, put, vec)
    for l in range(0 if hybrid else L):
        g = mf[f"layers/{l}"]
        p = f"blk.{l}."
        put(p + "attn_norm.weight", vec(g["attn_norm"]), stored=False)
        put(p + "ffn_norm.weight", vec(g["ffn_norm"]), stored=False)
        put(p + "attn_q.weight", g["wq"][()] if qwen3 else permute(g["wq"][()], H))
        put(p + "attn_k.weight", g["wk"][()] if qwen3 else permute(g["wk"][()], KV))
        if qwen3:
            put(p + "attn_q_norm.weight", vec(g["q_norm"]), stored=False)
            put(p + "attn_k_norm.weight", vec(g["k_norm"]), stored=False)
        put(p + "attn_v.weight", g["wv"][()])
        put(p + "attn_output.weight", g["wo"][()])
        put(p + "ffn_gate_inp.weight", vec(g["gate"]), stored=False)
    # Experts, stacked per layer, from whichever shard holds each.
    experts = {}
    for shard in sorted(glob.glob(os.path.join(model_dir, "experts-*.h5"))):
        f = h5py.File(shard, "r")
        for l in f["layers"]:
            for e in f[f"layers/{l}/experts"]:
                experts[(int(l), int(e))] = f[f"layers/{l}/experts/{e}"]
    for l in range(L):
        for ours, theirs in (("w1", "ffn_gate_exps"), ("w3", "ffn_up_exps"), ("w2", "ffn_down_exps")):
            put(f"blk.{l}.{theirs}.weight", np.stack([experts[(l, e)][ours][()] for e in range(E)]))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()

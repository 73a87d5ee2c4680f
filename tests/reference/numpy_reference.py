#!/usr/bin/env python3
"""Qwen3-MoE, gpt-oss, DeepSeek-V2/V3, GLM-4.5 and MiniMax-M2 in CI: an independent float64 numpy
forward, written from transformers' modeling_qwen3_moe.py, modeling_gpt_oss.py,
modeling_deepseek_v2/v3.py, modeling_glm4_moe.py and modeling_minimax_m2.py, against
`moerun convert` + `moerun infer`.

The CI venv's transformers (4.46) has neither family, and the 5.x venv that has them is 5.6 GB
(docs/NOTES.md), so CI checks them here and tests/reference/hf_2025_reference.py checks against
transformers itself (docs/data/2026-12-07-dbfde1b-hf_2025_reference.txt). The checkpoints are written with numpy in
the layout Hugging Face ships: Qwen3-MoE with one tensor per expert matrix, per-head q/k norms, an
explicit head_dim, yarn and a sliding window on every layer; gpt-oss with its experts in MXFP4
(blocks and E8M0 scales), attention sinks, biases everywhere, sliding and full layers alternating,
and yarn without truncation; and Qwen3-MoE as an fp8 checkpoint ships (Qwen3-FP8, DeepSeek-V3):
every linear weight but the router's and the LM head's in float8 e4m3 with float32 scales per
128 x 128 block (`weight_scale_inv`), at sizes with partial blocks. gpt-oss's experts are converted
twice: kept in MXFP4 as shipped (the default) and dequantized (--quantize none); the fp8 experts are
kept as shipped. DeepSeek-V2 (MLA without q_lora, group_limited_greedy over softmax scores, 2
shared experts, a dense first layer) and DeepSeek-V3 as an fp8 checkpoint (MLA with q_lora, sigmoid
scores with a correction bias, groups by their best two, YaRN with mscale_all_dim, a multi-token
prediction layer that convert skips), and V3 in float32 without q_lora and with 2 shared experts, all
with interleaved RoPE. Qwen3-Next and Qwen3.5-MoE as they ship and as fp8 checkpoints (experts kept
as shipped), Qwen3-Next without a shared expert (size 0, its zero-element matrices saved), and
MiniMax-M2 and GLM-4.5 as fp8 checkpoints (every projection, the experts kept as shipped). The
reference computes with the dequantized weights in float64. Prompts are longer than the windows.
Greedy tokens must be equal and every step's logits within 1e-4 (max |a-b| / max |b|) of the
reference, and within 1e-5 or three times what moving every weight by half a float32 ulp moves
that step, whichever is larger (reference_common.step_bars: the float32 floor of an
ill-conditioned step).

usage: numpy_reference.py MOERUN_BIN WORKDIR
"""
import json
import math
import os
import shutil
import sys

import h5py
import numpy as np
from reference_common import (Fp8, FLOAT32_TOL, FLOOR_FACTOR, FLOOR_SEEDS, conditioned_worst, convert_refused, dequant_fp8,
                              half_ulp_factors, quantize_fp8, read_logits, relative_error, run, step_bars, write_requests,
                              write_safetensors)

REL_TOL = 1e-4
LATENT_EPS = 1e-6  # DeepSeek's q_a_layernorm and kv_a_layernorm: the RMSNorm's default, not rms_norm_eps
STEPS = 5
PROMPTS = [[1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41], [3, 100, 7], [2] + list(range(60, 78))]
E2M1 = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6])


def write_checkpoint(d, config, tensors, shards=3):
    os.makedirs(d)
    json.dump(config, open(os.path.join(d, "config.json"), "w"))
    names = list(tensors)
    index = {}
    for s in range(shards):
        part = names[s * len(names) // shards:(s + 1) * len(names) // shards]
        f = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(os.path.join(d, f), {n: tensors[n] for n in part})
        index.update({n: f for n in part})
    json.dump({"metadata": {}, "weight_map": index}, open(os.path.join(d, "model.safetensors.index.json"), "w"))


def dequant_mxfp4(blocks, scales):
    """[..., G, 16] bytes and [..., G] scales -> [..., G * 32] float64 (low nibble first)."""
    lo, hi = E2M1[blocks & 15], E2M1[blocks >> 4]
    vals = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)
    vals = vals * np.exp2(scales.astype(np.float64) - 127)[..., None]
    return vals.reshape(*blocks.shape[:-2], -1)


class Rng:
    def __init__(self, seed):
        self.g = np.random.default_rng(seed)

    def w(self, *shape):  # a linear weight [out, in] or fused [E, in, out]: 1/sqrt(fan in)
        fan_in = shape[-1] if len(shape) == 2 else shape[1]
        return (self.g.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)

    def near(self, base, *shape):
        return (base + 0.1 * self.g.standard_normal(shape)).astype(np.float32)


def dense_layer(cfg, l):  # Qwen3MoeDecoderLayer: a dense MLP unless MoE by decoder_sparse_step and not in mlp_only_layers
    step = cfg.get("decoder_sparse_step", 1)
    return l in cfg.get("mlp_only_layers", []) or (l + 1) % step != 0


def swiglu(h, w1, w3, w2):
    a1 = h @ w1.T
    return (a1 / (1 + np.exp(-a1)) * (h @ w3.T)) @ w2.T


def expert_input(x):
    """A routed expert's matrix input as its kernel takes it: the floats themselves here;
    int4_reference.py swaps in the int8 rounding per group of 32 that the int4/q4 kernels apply."""
    return x


def routed_swiglu(h, w1, w3, w2):
    """A routed expert: swiglu with each matrix's input as expert_input gives it."""
    h = expert_input(h)
    a1 = h @ w1.T
    return expert_input(a1 / (1 + np.exp(-a1)) * (h @ w3.T)) @ w2.T


def qwen3_tensors(rng, cfg):
    """A Qwen3-MoE checkpoint's tensors for `cfg` (one tensor per expert matrix, per-head q/k norms)."""
    V, D, L, H, KV, HD = (cfg[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                           "num_key_value_heads", "head_dim"))
    FF, E, DFF = cfg["moe_intermediate_size"], cfg["num_experts"], cfg["intermediate_size"]
    t = {"model.embed_tokens.weight": rng.w(V, D), "model.norm.weight": rng.near(1, D), "lm_head.weight": rng.w(V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": rng.near(1, D), p + "post_attention_layernorm.weight": rng.near(1, D),
                  p + "self_attn.q_proj.weight": rng.w(H * HD, D), p + "self_attn.k_proj.weight": rng.w(KV * HD, D),
                  p + "self_attn.v_proj.weight": rng.w(KV * HD, D), p + "self_attn.o_proj.weight": rng.w(D, H * HD),
                  p + "self_attn.q_norm.weight": rng.near(1, HD), p + "self_attn.k_norm.weight": rng.near(1, HD)})
        if dense_layer(cfg, l):
            t.update({p + "mlp.gate_proj.weight": rng.w(DFF, D), p + "mlp.up_proj.weight": rng.w(DFF, D),
                      p + "mlp.down_proj.weight": rng.w(D, DFF)})
            continue
        t[p + "mlp.gate.weight"] = rng.w(E, D)
        for e in range(E):
            t.update({p + f"mlp.experts.{e}.gate_proj.weight": rng.w(FF, D), p + f"mlp.experts.{e}.up_proj.weight": rng.w(FF, D),
                      p + f"mlp.experts.{e}.down_proj.weight": rng.w(D, FF)})
    return t


# quantization_config of an fp8 checkpoint with 128 x 128 block scales (Qwen3-FP8, DeepSeek-V3).
FP8_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def qwen3_checkpoint(rng):
    cfg = dict(model_type="qwen3_moe", vocab_size=128, hidden_size=64, num_hidden_layers=4, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, intermediate_size=96, moe_intermediate_size=48, num_experts=8,
               num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1,
               eos_token_id=127, tie_word_embeddings=False, use_sliding_window=True, sliding_window=6, attention_bias=False,
               rope_theta=1e6, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
               decoder_sparse_step=1, mlp_only_layers=[1], hidden_act="silu")  # layer 1: a dense MLP of intermediate_size
    return cfg, qwen3_tensors(rng, cfg)


def qwen3_fp8_checkpoint(rng):
    """Qwen3-MoE as an fp8 checkpoint: hidden 160 and expert width 160 (two 128-blocks, the second
    partial), every linear weight but mlp.gate and lm_head in e4m3 with block scales. Returns the
    file's tensors and the reference's (dequantized)."""
    cfg = dict(model_type="qwen3_moe", vocab_size=128, hidden_size=160, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, head_dim=40, intermediate_size=192, moe_intermediate_size=160, num_experts=6,
               num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1,
               eos_token_id=127, tie_word_embeddings=False, attention_bias=False, rope_theta=1e6, mlp_only_layers=[1],
               hidden_act="silu", quantization_config=FP8_CONFIG)
    ref = qwen3_tensors(rng, cfg)
    t = fp8_projections(ref)
    return cfg, t, ref


def fp8_projections(ref):
    """The checkpoint's tensors with every projection in e4m3 and its block scales (weight_scale_inv);
    `ref` becomes what those bytes stand for."""
    t = {}
    for n, w in ref.items():
        if w.ndim == 2 and ("proj.weight" in n or "proj_with_mqa.weight" in n or n.endswith((".w1.weight", ".w2.weight", ".w3.weight"))):
            q, sc = quantize_fp8(w)
            t[n], t[n + "_scale_inv"] = q, sc
            ref[n] = dequant_fp8(q, sc)
        else:
            t[n] = w
    return t


def gpt_oss_checkpoint(rng):
    V, D, L, H, KV, HD, FF, E = 128, 64, 4, 4, 2, 16, 64, 6
    cfg = dict(model_type="gpt_oss", vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=KV,
               head_dim=HD, intermediate_size=FF, num_local_experts=E, num_experts_per_tok=2, max_position_embeddings=4096,
               rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=127, tie_word_embeddings=False, sliding_window=5,
               layer_types=["sliding_attention", "full_attention"] * (L // 2), attention_bias=True, swiglu_limit=7.0,
               rope_theta=150000.0, hidden_act="silu",
               rope_scaling={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                             "original_max_position_embeddings": 4096})
    t = {"model.embed_tokens.weight": rng.w(V, D), "model.norm.weight": rng.near(1, D), "lm_head.weight": rng.w(V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": rng.near(1, D), p + "post_attention_layernorm.weight": rng.near(1, D),
                  p + "self_attn.sinks": rng.near(0, H) * 10})
        for n, rows in (("q", H * HD), ("k", KV * HD), ("v", KV * HD)):
            t[p + f"self_attn.{n}_proj.weight"] = rng.w(rows, D)
            t[p + f"self_attn.{n}_proj.bias"] = rng.near(0, rows)
        t[p + "self_attn.o_proj.weight"], t[p + "self_attn.o_proj.bias"] = rng.w(D, H * HD), rng.near(0, D)
        t[p + "mlp.router.weight"], t[p + "mlp.router.bias"] = rng.w(E, D), rng.near(0, E)
        for which, rows, cols in (("gate_up_proj", 2 * FF, D), ("down_proj", D, FF)):
            t[p + f"mlp.experts.{which}_blocks"] = rng.g.integers(0, 256, (E, rows, cols // 32, 16), dtype=np.uint8)
            base = 127 - int(round(math.log2(math.sqrt(cols)))) - 2
            t[p + f"mlp.experts.{which}_scales"] = (base + rng.g.integers(-1, 2, (E, rows, cols // 32))).astype(np.uint8)
        t[p + "mlp.experts.gate_up_proj_bias"] = rng.near(0, E, 2 * FF)
        t[p + "mlp.experts.down_proj_bias"] = rng.near(0, E, D)
    return cfg, t


def deepseek_checkpoint(rng, v3, q_lora=None, shared=None, fp8=None):
    """DeepSeek in the layout its checkpoints ship: MLA (by default V3 with a q_lora path, V2 without), a
    dense first layer, shared experts (V3 one, V2 two by default), routed experts per expert. V3: sigmoid
    scores with a nonzero correction bias, 4 groups of 2 scored by their best two, 2 kept, renormalised
    and scaled; YaRN with mscale and mscale_all_dim; one multi-token-prediction layer that convert must
    skip; fp8 by default. V2: softmax, group_limited_greedy (groups by their best), raw weights scaled."""
    q_lora = v3 if q_lora is None else q_lora
    shared = (1 if v3 else 2) if shared is None else shared
    fp8 = v3 if fp8 is None else fp8
    V, D, L, H, E, FF, DFF = 128, 64, 3, 4, 8, 32, 96
    KVL, NOPE, ROPE, VD, QL = 32, 16, 8, 16, 48
    cfg = dict(model_type="deepseek_v3" if v3 else "deepseek_v2", vocab_size=V, hidden_size=D, num_hidden_layers=L,
               num_attention_heads=H, num_key_value_heads=H, intermediate_size=DFF, moe_intermediate_size=FF, n_routed_experts=E,
               n_shared_experts=shared, num_experts_per_tok=2, kv_lora_rank=KVL, q_lora_rank=QL if q_lora else None,
               qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=VD, first_k_dense_replace=1, n_group=4, topk_group=2,
               routed_scaling_factor=2.5 if v3 else 2.0, norm_topk_prob=v3, max_position_embeddings=512, rms_norm_eps=1e-5,
               rope_theta=10000.0, bos_token_id=1, eos_token_id=127, tie_word_embeddings=False, hidden_act="silu",
               scoring_func="sigmoid" if v3 else "softmax", topk_method="noaux_tc" if v3 else "group_limited_greedy")
    if v3:
        cfg.update(num_nextn_predict_layers=1, rope_scaling={"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 64,
                                                             "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1})
    t = {"model.embed_tokens.weight": rng.w(V, D), "model.norm.weight": rng.near(1, D), "lm_head.weight": rng.w(V, D)}
    for l in range(L + (1 if v3 else 0)):  # V3: layer L is the MTP layer
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": rng.near(1, D), p + "post_attention_layernorm.weight": rng.near(1, D),
                  p + "self_attn.kv_a_proj_with_mqa.weight": rng.w(KVL + ROPE, D), p + "self_attn.kv_a_layernorm.weight": rng.near(1, KVL),
                  p + "self_attn.kv_b_proj.weight": rng.w(H * (NOPE + VD), KVL), p + "self_attn.o_proj.weight": rng.w(D, H * VD)})
        if q_lora:
            t.update({p + "self_attn.q_a_proj.weight": rng.w(QL, D), p + "self_attn.q_a_layernorm.weight": rng.near(1, QL),
                      p + "self_attn.q_b_proj.weight": rng.w(H * (NOPE + ROPE), QL)})
        else:
            t[p + "self_attn.q_proj.weight"] = rng.w(H * (NOPE + ROPE), D)
        if l == 0:
            t.update({p + "mlp.gate_proj.weight": rng.w(DFF, D), p + "mlp.up_proj.weight": rng.w(DFF, D), p + "mlp.down_proj.weight": rng.w(D, DFF)})
            continue
        t[p + "mlp.gate.weight"] = rng.w(E, D)
        if v3:
            t[p + "mlp.gate.e_score_correction_bias"] = rng.near(0, E) * 0.5
        SFF = FF * cfg["n_shared_experts"]
        t.update({p + "mlp.shared_experts.gate_proj.weight": rng.w(SFF, D), p + "mlp.shared_experts.up_proj.weight": rng.w(SFF, D),
                  p + "mlp.shared_experts.down_proj.weight": rng.w(D, SFF)})
        for e in range(E):
            t.update({p + f"mlp.experts.{e}.gate_proj.weight": rng.w(FF, D), p + f"mlp.experts.{e}.up_proj.weight": rng.w(FF, D),
                      p + f"mlp.experts.{e}.down_proj.weight": rng.w(D, FF)})
    if fp8:  # an fp8 checkpoint, as V3 ships: every projection of the attention, the MLPs and the experts
        ref = dict(t)
        t = fp8_projections(ref)
        cfg["quantization_config"] = FP8_CONFIG
        return cfg, t, ref
    return cfg, t, t


def deepseek_v32_checkpoint(rng, topk):
    """DeepSeek-V3.2: V3's layout (float32 here) with DeepSeek Sparse Attention's indexer in every
    layer, the MTP layer's included (convert skips it): 4 index heads of 16, RoPE on their first 8;
    `topk` positions per query, below the longer prompts' lengths."""
    cfg, t, _ = deepseek_checkpoint(rng, v3=True, fp8=False)
    IH, ID, D, QL = 4, 16, cfg["hidden_size"], cfg["q_lora_rank"]
    cfg.update(model_type="deepseek_v32", index_n_heads=IH, index_head_dim=ID, index_topk=topk)
    for l in range(cfg["num_hidden_layers"] + 1):
        p = f"model.layers.{l}.self_attn.indexer."
        t.update({p + "wq_b.weight": rng.w(IH * ID, QL), p + "wk.weight": rng.w(ID, D), p + "k_norm.weight": rng.near(1, ID),
                  p + "k_norm.bias": rng.near(0, ID) * 0.1, p + "weights_proj.weight": rng.w(IH, D)})
    return cfg, t


def glm_moe_dsa_checkpoint(rng, topk):
    """GLM-5 (glm_moe_dsa): V3.2's layout with the indexer's RoPE interleaved and layer 2 sharing layer
    1's choice (indexer_types; no indexer weights of its own)."""
    cfg, t = deepseek_v32_checkpoint(rng, topk)
    cfg.update(model_type="glm_moe_dsa", indexer_types=["full", "full", "shared"])
    for n in [n for n in t if n.startswith("model.layers.2.self_attn.indexer.")]:
        del t[n]
    return cfg, t


def dsa_selected(cfg, g, p, h, q_latent, T):
    """DeepseekV32Indexer (GlmMoeDsaIndexer: interleaved RoPE) in float64: [T, T] True where query t
    attends position s (causal, and among its index_topk best scores; ties to the earlier position,
    as a stable sort gives)."""
    IH, ID, ROPE, K = cfg["index_n_heads"], cfg["index_head_dim"], cfg["qk_rope_head_dim"], cfg["index_topk"]
    freq, att = inv_freq(cfg, ROPE)
    pos = np.arange(T, dtype=np.float64)
    ang = pos[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :] * att, np.sin(ang)[:, None, :] * att

    def half_rope(x):  # rotate_half (V3.2), or GLM's pairs (2i, 2i+1) rotated and written as [evens | odds]
        r = x[..., :ROPE]
        if cfg["model_type"] == "glm_moe_dsa":
            a, b = r[..., 0::2], r[..., 1::2]
            r = np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)
        else:
            r = rope(r, pos, freq, att)
        return np.concatenate([r, x[..., ROPE:]], axis=-1)
    q = half_rope((q_latent @ g(p + "indexer.wq_b.weight").T).reshape(T, IH, ID))
    k = h @ g(p + "indexer.wk.weight").T
    k = (k - k.mean(-1, keepdims=True)) / np.sqrt(k.var(-1, keepdims=True) + 1e-6) * g(p + "indexer.k_norm.weight") + g(p + "indexer.k_norm.bias")
    k = half_rope(k[:, None, :])[:, 0, :]
    w = (h @ g(p + "indexer.weights_proj.weight").T) * IH ** -0.5
    score = np.einsum("th,ths->ts", w, np.maximum(np.einsum("thd,sd->ths", q, k) * ID ** -0.5, 0))
    causal = np.tril(np.ones((T, T), bool))
    score = np.where(causal, score, -np.inf)
    keep = np.zeros((T, T), bool)
    for ti in range(T):
        keep[ti, np.argsort(-score[ti], kind="stable")[:min(K, ti + 1)]] = True
    return keep & causal


def deepseek_forward(cfg, t, ids):
    """modeling_deepseek_v2/v3 in float64: MLA with interleaved RoPE, group-limited routing, shared experts."""
    g = lambda n: t[n].astype(np.float64)
    v3 = cfg["model_type"] in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")
    H, L, eps = cfg["num_attention_heads"], cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    KVL, NOPE, ROPE, VD = cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    freq, att = inv_freq(cfg, ROPE)
    scale = (NOPE + ROPE) ** -0.5
    r = cfg.get("rope_scaling") or {}
    if r.get("mscale_all_dim"):
        m = 0.1 * r["mscale_all_dim"] * math.log(r["factor"]) + 1.0
        scale *= m * m
    T = len(ids)
    pos = np.arange(T, dtype=np.float64)
    ang = pos[:, None] * freq[None, :]
    cos, sin = np.cos(ang) * att, np.sin(ang) * att

    def rope_pairs(x):  # x [T, heads, ROPE]: pairs (2i, 2i+1) rotated by frequency i, kept interleaved
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos[:, None, :] - b * sin[:, None, :]
        out[..., 1::2] = b * cos[:, None, :] + a * sin[:, None, :]
        return out

    x = g("model.embed_tokens.weight")[ids]
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, g(p + "input_layernorm.weight"), eps)
        if cfg["q_lora_rank"]:
            q_latent = rms(h @ g(p + "self_attn.q_a_proj.weight").T, g(p + "self_attn.q_a_layernorm.weight"), LATENT_EPS)
            q = q_latent @ g(p + "self_attn.q_b_proj.weight").T
        else:
            q = h @ g(p + "self_attn.q_proj.weight").T
        q = q.reshape(T, H, NOPE + ROPE)
        ckv = h @ g(p + "self_attn.kv_a_proj_with_mqa.weight").T
        c = rms(ckv[:, :KVL], g(p + "self_attn.kv_a_layernorm.weight"), LATENT_EPS)
        k_rot = rope_pairs(ckv[:, None, KVL:])
        q = np.concatenate([q[..., :NOPE], rope_pairs(q[..., NOPE:])], axis=-1)
        kv = (c @ g(p + "self_attn.kv_b_proj.weight").T).reshape(T, H, NOPE + VD)
        kk = np.concatenate([kv[..., :NOPE], np.repeat(k_rot, H, axis=1)], axis=-1)
        s_ = np.einsum("thd,shd->hts", q, kk) * scale
        if not cfg.get("index_topk"):
            allowed = np.tril(np.ones((T, T), bool))
        elif (cfg.get("indexer_types") or ["full"] * L)[l] == "full":  # a shared layer keeps the last full layer's
            allowed = dsa_selected(cfg, g, p + "self_attn.", h, q_latent, T)
        s_ = np.where(allowed[None], s_, -np.inf)
        pr = np.exp(s_ - s_.max(axis=-1, keepdims=True))
        pr /= pr.sum(axis=-1, keepdims=True)
        o = np.einsum("hts,shd->thd", pr, kv[..., NOPE:]).reshape(T, H * VD)
        x = x + o @ g(p + "self_attn.o_proj.weight").T
        x = x + deepseek_mlp(cfg, g, p, l, rms(x, g(p + "post_attention_layernorm.weight"), eps), v3, -np.inf)
    return rms(x, g("model.norm.weight"), eps) @ g("lm_head.weight").T


def deepseek_mlp(cfg, g, p, l, h, v3, masked):
    """DeepseekV2/V3MoE (and Glm4MoeMoE) in float64: a dense MLP for the first first_k_dense_replace
    layers, else the shared experts plus the routed ones: V3 (and GLM) sigmoid scores with the
    correction bias for the choice, groups by their best two, V2 a softmax, groups by their best;
    groups left out score `masked` (-inf here, 0.0 in transformers' V3 and GLM: equal while the
    kept scores stay positive, as here)."""
    if l < cfg["first_k_dense_replace"]:
        return swiglu(h, g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight"), g(p + "mlp.down_proj.weight"))
    E, k, G, TG = cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["n_group"], cfg["topk_group"]
    logits = h @ g(p + "mlp.gate.weight").T
    out = swiglu(h, g(p + "mlp.shared_experts.gate_proj.weight"), g(p + "mlp.shared_experts.up_proj.weight"),
                 g(p + "mlp.shared_experts.down_proj.weight"))
    for ti in range(len(h)):
        if v3:
            sc = 1 / (1 + np.exp(-logits[ti]))
            choice = sc + g(p + "mlp.gate.e_score_correction_bias")
            gs = np.sort(choice.reshape(G, -1), axis=-1)[:, -2:].sum(axis=-1)
        else:
            sc = np.exp(logits[ti] - logits[ti].max())
            sc /= sc.sum()
            choice = sc.copy()
            gs = choice.reshape(G, -1).max(axis=-1)
        keep = np.argsort(-gs, kind="stable")[:TG]
        mask = np.repeat(np.isin(np.arange(G), keep), E // G)
        top = np.argsort(-np.where(mask, choice, masked), kind="stable")[:k]
        w = sc[top]
        if cfg["norm_topk_prob"]:
            w = w / (w.sum() + 1e-20)
        w = w * cfg["routed_scaling_factor"]
        for e, we in zip(top, w):
            ep = p + f"mlp.experts.{e}."
            out[ti] += we * routed_swiglu(h[ti:ti + 1], g(ep + "gate_proj.weight"), g(ep + "up_proj.weight"), g(ep + "down_proj.weight"))[0]
    return out


# ---- the float64 forward, as the modeling files compute it ----

def rms(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def inv_freq(cfg, hd):
    theta = cfg["rope_theta"]
    r = cfg.get("rope_scaling") or {}
    freq = 1.0 / theta ** (np.arange(0, hd, 2) / hd)
    if r.get("rope_type") != "yarn":
        return freq, 1.0
    factor, orig = r["factor"], r["original_max_position_embeddings"]
    corr = lambda rot: hd * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
    low, high = corr(r.get("beta_fast", 32)), corr(r.get("beta_slow", 1))
    if r.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, hd - 1)
    ramp = np.clip((np.arange(hd // 2) - low) / (high - low if high > low else 0.001), 0, 1)
    extrapolate = 1 - ramp
    mscale = lambda m: 0.1 * m * math.log(factor) + 1.0 if factor > 1 else 1.0
    att = mscale(r["mscale"]) / mscale(r["mscale_all_dim"]) if r.get("mscale") and r.get("mscale_all_dim") else mscale(1.0)
    return freq / factor * (1 - extrapolate) + freq * extrapolate, att


def rope(x, pos, freq, scale):  # x [T, heads, hd], rotate_half
    ang = pos[:, None] * freq[None, :]
    cos, sin = np.cos(ang)[:, None, :] * scale, np.sin(ang)[:, None, :] * scale
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def attention(q, k, v, window, sinks):  # q [T, H, hd], k, v [T, KV, hd]
    T, H, hd = q.shape
    rep = H // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) / math.sqrt(hd)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    allowed = (j <= i) & ((j > i - window) if window else True)
    s = np.where(allowed[None], s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    if sinks is not None:
        m = np.maximum(m, sinks[:, None, None])
    p = np.exp(s - m)
    z = p.sum(axis=-1, keepdims=True) + (np.exp(sinks[:, None, None] - m) if sinks is not None else 0)
    return np.einsum("hts,shd->thd", p / z, v)


def forward(cfg, t, ids):
    g = lambda n: t[n].astype(np.float64)
    D, H, KV, L = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    hd, eps, k = cfg["head_dim"], cfg["rms_norm_eps"], cfg["num_experts_per_tok"]
    gpt = cfg["model_type"] == "gpt_oss"
    freq, scale = inv_freq(cfg, hd)
    pos = np.arange(len(ids), dtype=np.float64)
    x = g("model.embed_tokens.weight")[ids]
    for l in range(L):
        p = f"model.layers.{l}."
        lin = lambda n, a: a @ g(p + n + ".weight").T + (g(p + n + ".bias") if gpt else 0)
        h = rms(x, g(p + "input_layernorm.weight"), eps)
        q = lin("self_attn.q_proj", h).reshape(len(ids), H, hd)
        kk = lin("self_attn.k_proj", h).reshape(len(ids), KV, hd)
        v = lin("self_attn.v_proj", h).reshape(len(ids), KV, hd)
        if not gpt:
            q, kk = rms(q, g(p + "self_attn.q_norm.weight"), eps), rms(kk, g(p + "self_attn.k_norm.weight"), eps)
            window = cfg["sliding_window"] if cfg.get("use_sliding_window") else 0
        else:
            window = cfg["sliding_window"] if cfg["layer_types"][l] == "sliding_attention" else 0
        q, kk = rope(q, pos, freq, scale), rope(kk, pos, freq, scale)
        a = attention(q, kk, v, window, g(p + "self_attn.sinks") if gpt else None).reshape(len(ids), H * hd)
        x = x + lin("self_attn.o_proj", a)
        h = rms(x, g(p + "post_attention_layernorm.weight"), eps)
        if not gpt and dense_layer(cfg, l):
            x = x + swiglu(h, g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight"), g(p + "mlp.down_proj.weight"))
            continue
        out = np.zeros_like(h)
        if gpt:
            logits = h @ g(p + "mlp.router.weight").T + g(p + "mlp.router.bias")
            gu_all = dequant_mxfp4(t[p + "mlp.experts.gate_up_proj_blocks"], t[p + "mlp.experts.gate_up_proj_scales"])  # [E, 2ff, d]
            dn_all = dequant_mxfp4(t[p + "mlp.experts.down_proj_blocks"], t[p + "mlp.experts.down_proj_scales"])  # [E, d, ff]
            gub, dnb = g(p + "mlp.experts.gate_up_proj_bias"), g(p + "mlp.experts.down_proj_bias")
        else:
            logits = h @ g(p + "mlp.gate.weight").T
        for ti in range(len(ids)):
            top = np.argsort(-logits[ti], kind="stable")[:k]
            if gpt:  # top-k of the logits, softmax over the chosen
                w = np.exp(logits[ti, top] - logits[ti, top].max())
                w /= w.sum()
            else:  # softmax, top-k, renormalised (norm_topk_prob)
                pr = np.exp(logits[ti] - logits[ti].max())
                pr /= pr.sum()
                w = pr[top] / pr[top].sum()
            for e, we in zip(top, w):
                if gpt:
                    gu = gu_all[e] @ h[ti] + gub[e]
                    gate, up = np.minimum(gu[0::2], 7.0), np.clip(gu[1::2], -7.0, 7.0)
                    act = (up + 1) * gate / (1 + np.exp(-1.702 * gate))
                    y = dn_all[e] @ act + dnb[e]
                else:
                    ep = p + f"mlp.experts.{e}."
                    y = routed_swiglu(h[ti:ti + 1], g(ep + "gate_proj.weight"), g(ep + "up_proj.weight"), g(ep + "down_proj.weight"))[0]
                out[ti] += we * y
        x = x + out
    return rms(x, g("model.norm.weight"), eps) @ g("lm_head.weight").T


def attention_tensors(rng, p, D, H, KV, HD, bias=False, norms=None):
    """A GQA layer's norms and q/k/v/o projections (q/k/v biases with `bias`; `norms`: the q and k
    norm widths, per head or over the projection)."""
    t = {p + "input_layernorm.weight": rng.near(1, D), p + "post_attention_layernorm.weight": rng.near(1, D),
         p + "self_attn.q_proj.weight": rng.w(H * HD, D), p + "self_attn.k_proj.weight": rng.w(KV * HD, D),
         p + "self_attn.v_proj.weight": rng.w(KV * HD, D), p + "self_attn.o_proj.weight": rng.w(D, H * HD)}
    if bias:
        t.update({p + "self_attn.q_proj.bias": rng.near(0, H * HD), p + "self_attn.k_proj.bias": rng.near(0, KV * HD),
                  p + "self_attn.v_proj.bias": rng.near(0, KV * HD)})
    if norms:
        t.update({p + "self_attn.q_norm.weight": rng.near(1, norms[0]), p + "self_attn.k_norm.weight": rng.near(1, norms[1])})
    return t


def glm4_checkpoint(rng):
    """GLM-4.5 as it ships (transformers' Glm4MoeConfig names): GQA with q/k/v biases and per-head q/k
    norms (use_qk_norm), RoPE on half of each head (partial_rotary_factor 0.5), a dense first layer,
    sigmoid routing with a correction bias over 2 groups of 4 (1 kept), renormalised and scaled, one
    shared expert, and a multi-token-prediction layer that convert must skip."""
    V, D, L, H, KV, HD, E, FF, DFF = 128, 64, 3, 4, 2, 32, 8, 32, 96
    cfg = dict(model_type="glm4_moe", vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
               num_key_value_heads=KV, head_dim=HD, partial_rotary_factor=0.5, intermediate_size=DFF, moe_intermediate_size=FF,
               n_routed_experts=E, n_shared_experts=1, num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1,
               routed_scaling_factor=2.5, norm_topk_prob=True, use_qk_norm=True, attention_bias=True, rope_theta=10000.0,
               max_position_embeddings=512, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=127, tie_word_embeddings=False,
               num_nextn_predict_layers=1, hidden_act="silu")
    t = {"model.embed_tokens.weight": rng.w(V, D), "model.norm.weight": rng.near(1, D), "lm_head.weight": rng.w(V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        t.update(attention_tensors(rng, p, D, H, KV, HD, bias=True, norms=(HD, HD)))
        if l < cfg["first_k_dense_replace"]:
            t.update({p + "mlp.gate_proj.weight": rng.w(DFF, D), p + "mlp.up_proj.weight": rng.w(DFF, D), p + "mlp.down_proj.weight": rng.w(D, DFF)})
            continue
        t.update({p + "mlp.gate.weight": rng.w(E, D), p + "mlp.gate.e_score_correction_bias": rng.near(0, E) * 0.5,
                  p + "mlp.shared_experts.gate_proj.weight": rng.w(FF, D), p + "mlp.shared_experts.up_proj.weight": rng.w(FF, D),
                  p + "mlp.shared_experts.down_proj.weight": rng.w(D, FF)})
        for e in range(E):
            t.update({p + f"mlp.experts.{e}.gate_proj.weight": rng.w(FF, D), p + f"mlp.experts.{e}.up_proj.weight": rng.w(FF, D),
                      p + f"mlp.experts.{e}.down_proj.weight": rng.w(D, FF)})
    p = f"model.layers.{L}."  # the MTP layer
    t.update({p + "eh_proj.weight": rng.w(D, 2 * D), p + "enorm.weight": rng.near(1, D), p + "hnorm.weight": rng.near(1, D)})
    return cfg, t


def partial_rope(cfg, hd, T):
    """RoPE (rotate_half) on the first R dims of each head of T positions, the rest passed through: R
    from rotary_dim, or head_dim x partial_rotary_factor (top level, or in rope_parameters as
    transformers 5.x saves it); theta likewise."""
    rp = cfg.get("rope_parameters", {})
    R = cfg["rotary_dim"] if "rotary_dim" in cfg else int(hd * cfg.get("partial_rotary_factor", rp.get("partial_rotary_factor", 1.0)))
    freq = 1.0 / cfg.get("rope_theta", rp.get("rope_theta")) ** (np.arange(0, R, 2) / R)
    pos = np.arange(T, dtype=np.float64)
    return lambda x: np.concatenate([rope(x[..., :R], pos, freq, 1.0), x[..., R:]], axis=-1)


def glm4_forward(cfg, t, ids):
    """modeling_glm4_moe in float64: partial rotate_half RoPE, per-head q/k norms, DeepSeek-V3's router."""
    g = lambda n: t[n].astype(np.float64)
    H, KV, HD, L, eps = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    T = len(ids)
    rope_part = partial_rope(cfg, HD, T)

    x = g("model.embed_tokens.weight")[ids]
    for l in range(L):
        p = f"model.layers.{l}."
        lin = lambda n, a: a @ g(p + n + ".weight").T + g(p + n + ".bias")
        h = rms(x, g(p + "input_layernorm.weight"), eps)
        q = rms(lin("self_attn.q_proj", h).reshape(T, H, HD), g(p + "self_attn.q_norm.weight"), eps)
        kk = rms(lin("self_attn.k_proj", h).reshape(T, KV, HD), g(p + "self_attn.k_norm.weight"), eps)
        v = lin("self_attn.v_proj", h).reshape(T, KV, HD)
        a = attention(rope_part(q), rope_part(kk), v, 0, None).reshape(T, H * HD)
        x = x + a @ g(p + "self_attn.o_proj.weight").T
        x = x + deepseek_mlp(cfg, g, p, l, rms(x, g(p + "post_attention_layernorm.weight"), eps), True, 0.0)  # Glm4MoeTopkRouter masks with 0.0
    return rms(x, g("model.norm.weight"), eps) @ g("lm_head.weight").T


def minimax_checkpoint(rng, FF=48):
    """MiniMax-M2 as it ships: GQA without biases, q and k RMSNorm over the whole projection
    (qk_norm_type per_layer), RoPE on rotary_dim 16 of each head's 32, Mixtral's expert names under
    block_sparse_moe, sigmoid scores with a correction bias (block_sparse_moe.e_score_correction_bias),
    and a multi-token-prediction module that convert must skip. FF: the experts' width."""
    V, D, L, H, KV, HD, E = 128, 64, 3, 4, 2, 32, 8
    cfg = dict(model_type="minimax_m2", vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
               num_key_value_heads=KV, head_dim=HD, rotary_dim=16, intermediate_size=FF, num_local_experts=E, num_experts_per_tok=2,
               qk_norm_type="per_layer", scoring_func="sigmoid", use_routing_bias=True, rope_theta=5000000.0,
               max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=127, tie_word_embeddings=False,
               num_mtp_modules=1, hidden_act="silu")
    t = {"model.embed_tokens.weight": rng.w(V, D), "model.norm.weight": rng.near(1, D), "lm_head.weight": rng.w(V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        t.update(attention_tensors(rng, p, D, H, KV, HD, norms=(H * HD, KV * HD)))
        t.update({p + "block_sparse_moe.gate.weight": rng.w(E, D), p + "block_sparse_moe.e_score_correction_bias": rng.near(0, E) * 0.5})
        for e in range(E):
            t.update({p + f"block_sparse_moe.experts.{e}.w1.weight": rng.w(FF, D), p + f"block_sparse_moe.experts.{e}.w3.weight": rng.w(FF, D),
                      p + f"block_sparse_moe.experts.{e}.w2.weight": rng.w(D, FF)})
    p = f"model.layers.{L}."  # the MTP module
    t.update({p + "eh_proj.weight": rng.w(D, 2 * D), p + "enorm.weight": rng.near(1, D)})
    return cfg, t


def minimax_forward(cfg, t, ids):
    """modeling_minimax_m2 in float64: q/k norms over the projection, partial rotate_half RoPE, sigmoid
    routing with the correction bias for the choice, the chosen scores renormalised."""
    g = lambda n: t[n].astype(np.float64)
    H, KV, HD, L, eps, k = (cfg[n] for n in ("num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
                                             "rms_norm_eps", "num_experts_per_tok"))
    T = len(ids)
    rope_part = partial_rope(cfg, HD, T)
    x = g("model.embed_tokens.weight")[ids]
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, g(p + "input_layernorm.weight"), eps)
        q = rms(h @ g(p + "self_attn.q_proj.weight").T, g(p + "self_attn.q_norm.weight"), eps).reshape(T, H, HD)
        kk = rms(h @ g(p + "self_attn.k_proj.weight").T, g(p + "self_attn.k_norm.weight"), eps).reshape(T, KV, HD)
        v = (h @ g(p + "self_attn.v_proj.weight").T).reshape(T, KV, HD)
        a = attention(rope_part(q), rope_part(kk), v, 0, None).reshape(T, H * HD)
        x = x + a @ g(p + "self_attn.o_proj.weight").T
        h = rms(x, g(p + "post_attention_layernorm.weight"), eps)
        sc = 1 / (1 + np.exp(-(h @ g(p + "block_sparse_moe.gate.weight").T)))
        out = np.zeros_like(h)
        for ti in range(T):
            top = np.argsort(-(sc[ti] + g(p + "block_sparse_moe.e_score_correction_bias")), kind="stable")[:k]
            w = sc[ti, top] / sc[ti, top].sum()
            for e, we in zip(top, w):
                ep = p + f"block_sparse_moe.experts.{e}."
                out[ti] += we * routed_swiglu(h[ti:ti + 1], g(ep + "w1.weight"), g(ep + "w3.weight"), g(ep + "w2.weight"))[0]
        x = x + out
    return rms(x, g("model.norm.weight"), eps) @ g("lm_head.weight").T


def qwen3_next_checkpoint(rng):
    """Qwen3-Next as it ships (transformers' Qwen3NextConfig names): layers 0-2 Gated DeltaNet with the
    fused, per-key-head interleaved in_proj_qkvz and in_proj_ba (2 key heads, 4 value heads), layer 3
    full attention with q_proj doubled (query and output gate per head), per-head q/k norms and RoPE on
    a quarter of each head; (1 + w) norms stored as w near 0; layer 1 a dense MLP (mlp_only_layers);
    softmax top-2 of 8 experts renormalised and a shared expert behind a sigmoid gate; an mtp module."""
    V, D, L, H, KV, HD, E, FF, SFF, DFF = 128, 64, 4, 4, 2, 32, 8, 32, 48, 96
    HK, HV, DK, DV, K = 2, 4, 16, 16, 4
    cfg = dict(model_type="qwen3_next", vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
               num_key_value_heads=KV, head_dim=HD, partial_rotary_factor=0.25, intermediate_size=DFF, moe_intermediate_size=FF,
               shared_expert_intermediate_size=SFF, num_experts=E, num_experts_per_tok=2, norm_topk_prob=True,
               decoder_sparse_step=1, mlp_only_layers=[1], linear_num_key_heads=HK, linear_num_value_heads=HV,
               linear_key_head_dim=DK, linear_value_head_dim=DV, linear_conv_kernel_dim=K, full_attention_interval=4,
               rope_theta=10000.0, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=127,
               tie_word_embeddings=False, attention_bias=False, hidden_act="silu")
    t = {"model.embed_tokens.weight": rng.w(V, D), "model.norm.weight": rng.near(0, D), "lm_head.weight": rng.w(V, D)}
    for l in range(L):
        p = f"model.layers.{l}."
        t.update({p + "input_layernorm.weight": rng.near(0, D), p + "post_attention_layernorm.weight": rng.near(0, D)})
        if (l + 1) % 4 == 0:
            t.update({p + "self_attn.q_proj.weight": rng.w(2 * H * HD, D), p + "self_attn.k_proj.weight": rng.w(KV * HD, D),
                      p + "self_attn.v_proj.weight": rng.w(KV * HD, D), p + "self_attn.o_proj.weight": rng.w(D, H * HD),
                      p + "self_attn.q_norm.weight": rng.near(0, HD), p + "self_attn.k_norm.weight": rng.near(0, HD)})
        else:
            C = 2 * HK * DK + HV * DV
            t.update({p + "linear_attn.in_proj_qkvz.weight": rng.w(2 * HK * DK + 2 * HV * DV, D),
                      p + "linear_attn.in_proj_ba.weight": rng.w(2 * HV, D),
                      p + "linear_attn.conv1d.weight": (rng.g.standard_normal((C, 1, K)) / 2).astype(np.float32),
                      p + "linear_attn.dt_bias": rng.near(1, HV), p + "linear_attn.A_log": np.log(rng.g.uniform(1, 16, HV)).astype(np.float32),
                      p + "linear_attn.norm.weight": rng.near(1, DV), p + "linear_attn.out_proj.weight": rng.w(D, HV * DV)})
        if l in cfg["mlp_only_layers"]:
            t.update({p + "mlp.gate_proj.weight": rng.w(DFF, D), p + "mlp.up_proj.weight": rng.w(DFF, D), p + "mlp.down_proj.weight": rng.w(D, DFF)})
            continue
        t.update({p + "mlp.gate.weight": rng.w(E, D), p + "mlp.shared_expert_gate.weight": rng.w(1, D),
                  p + "mlp.shared_expert.gate_proj.weight": rng.w(SFF, D), p + "mlp.shared_expert.up_proj.weight": rng.w(SFF, D),
                  p + "mlp.shared_expert.down_proj.weight": rng.w(D, SFF)})
        for e in range(E):
            t.update({p + f"mlp.experts.{e}.gate_proj.weight": rng.w(FF, D), p + f"mlp.experts.{e}.up_proj.weight": rng.w(FF, D),
                      p + f"mlp.experts.{e}.down_proj.weight": rng.w(D, FF)})
    t.update({"mtp.fc.weight": rng.w(D, 2 * D), "mtp.norm.weight": rng.near(0, D)})  # not converted
    return cfg, t


def gated_deltanet(cfg, g, p, h):
    """Qwen3NextGatedDeltaNet over a whole prompt from a zero state, in float64 (the torch path's
    recurrent form: fix_query_key_value_ordering, causal conv + SiLU, l2-normalised q/k, the rule)."""
    T = h.shape[0]
    HK, HV, DK, DV, K = (cfg[n] for n in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                                           "linear_value_head_dim", "linear_conv_kernel_dim"))
    r = HV // HK
    qkvz = (h @ g(p + "in_proj_qkvz.weight").T).reshape(T, HK, 2 * DK + 2 * r * DV)
    ba = (h @ g(p + "in_proj_ba.weight").T).reshape(T, HK, 2 * r)
    q, k = qkvz[..., :DK].reshape(T, -1), qkvz[..., DK:2 * DK].reshape(T, -1)
    v, z = qkvz[..., 2 * DK:2 * DK + r * DV].reshape(T, -1), qkvz[..., 2 * DK + r * DV:].reshape(T, HV, DV)
    b, a = ba[..., :r].reshape(T, HV), ba[..., r:].reshape(T, HV)
    x = np.concatenate([q, k, v], axis=-1)  # [T, C]
    w = g(p + "conv1d.weight")[:, 0, :]  # [C, K]
    xp = np.concatenate([np.zeros((K - 1, x.shape[1])), x])
    conv = np.stack([(xp[t:t + K].T * w).sum(-1) for t in range(T)])
    x = conv / (1 + np.exp(-conv))
    q, k, v = x[:, :HK * DK].reshape(T, HK, DK), x[:, HK * DK:2 * HK * DK].reshape(T, HK, DK), x[:, 2 * HK * DK:].reshape(T, HV, DV)
    l2 = lambda u: u / np.sqrt((u * u).sum(-1, keepdims=True) + 1e-6)
    q, k = np.repeat(l2(q), r, axis=1) / np.sqrt(DK), np.repeat(l2(k), r, axis=1)
    beta = 1 / (1 + np.exp(-b))
    gl = -np.exp(g(p + "A_log")) * np.log1p(np.exp(a + g(p + "dt_bias")))
    S = np.zeros((HV, DK, DV))
    out = np.zeros((T, HV, DV))
    for t in range(T):
        S = S * np.exp(gl[t])[:, None, None]
        delta = (v[t] - np.einsum("hkv,hk->hv", S, k[t])) * beta[t][:, None]
        S = S + k[t][:, :, None] * delta[:, None, :]
        out[t] = np.einsum("hkv,hk->hv", S, q[t])
    o = rms(out, g(p + "norm.weight"), cfg["rms_norm_eps"]) * (z / (1 + np.exp(-z)))
    return o.reshape(T, HV * DV) @ g(p + "out_proj.weight").T


def qwen3_next_forward(cfg, t, ids):
    """modeling_qwen3_next in float64: the layers' kinds by full_attention_interval, (1 + w) norms."""
    g = lambda n: t[n].astype(np.float64)
    H, KV, HD, L, eps, k = (cfg[n] for n in ("num_attention_heads", "num_key_value_heads", "head_dim", "num_hidden_layers",
                                             "rms_norm_eps", "num_experts_per_tok"))
    norm = lambda x, n: rms(x, 1.0 + g(n), eps)
    T = len(ids)
    rope_part = partial_rope(cfg, HD, T)
    x = g("model.embed_tokens.weight")[ids]
    for l in range(L):
        p = f"model.layers.{l}."
        h = norm(x, p + "input_layernorm.weight")
        if (l + 1) % cfg["full_attention_interval"] == 0:
            qg = (h @ g(p + "self_attn.q_proj.weight").T).reshape(T, H, 2 * HD)
            q, gate = norm(qg[..., :HD], p + "self_attn.q_norm.weight"), qg[..., HD:].reshape(T, H * HD)
            kk = norm((h @ g(p + "self_attn.k_proj.weight").T).reshape(T, KV, HD), p + "self_attn.k_norm.weight")
            v = (h @ g(p + "self_attn.v_proj.weight").T).reshape(T, KV, HD)
            a = attention(rope_part(q), rope_part(kk), v, 0, None).reshape(T, H * HD) / (1 + np.exp(-gate))
            x = x + a @ g(p + "self_attn.o_proj.weight").T
        else:
            x = x + gated_deltanet(cfg, g, p + "linear_attn.", h)
        h = norm(x, p + "post_attention_layernorm.weight")
        if l in cfg["mlp_only_layers"]:
            x = x + swiglu(h, g(p + "mlp.gate_proj.weight"), g(p + "mlp.up_proj.weight"), g(p + "mlp.down_proj.weight"))
            continue
        logits = h @ g(p + "mlp.gate.weight").T
        out = np.zeros_like(h)
        for ti in range(T):
            pr = np.exp(logits[ti] - logits[ti].max())
            pr /= pr.sum()
            top = np.argsort(-pr, kind="stable")[:k]
            for e, we in zip(top, pr[top] / pr[top].sum()):
                ep = p + f"mlp.experts.{e}."
                out[ti] += we * routed_swiglu(h[ti:ti + 1], g(ep + "gate_proj.weight"), g(ep + "up_proj.weight"), g(ep + "down_proj.weight"))[0]
        sh = swiglu(h, g(p + "mlp.shared_expert.gate_proj.weight"), g(p + "mlp.shared_expert.up_proj.weight"),
                    g(p + "mlp.shared_expert.down_proj.weight"))
        x = x + out + sh / (1 + np.exp(-(h @ g(p + "mlp.shared_expert_gate.weight").T)))
    return norm(x, "model.norm.weight") @ g("lm_head.weight").T


def qwen3_5_checkpoint(rng):
    """Qwen3.5-MoE as its multimodal checkpoint ships it: config.json's text_config (model_type
    qwen3_5_moe_text, every layer MoE, layer_types listed, the factor and theta in rope_parameters
    with mrope sections) beside a vision_config; the text model's tensors under model.language_model.
    with separate in_proj_qkv, in_proj_z, in_proj_b, in_proj_a; a vision tensor and an mtp module
    convert skips. Returns the checkpoint's config and tensors, and the Qwen3-Next form of the same
    model with its config for qwen3_next_forward."""
    ref_cfg, t = qwen3_next_checkpoint(rng)
    ref_cfg = dict(ref_cfg, mlp_only_layers=[], layer_types=["linear_attention"] * 3 + ["full_attention"])
    HK, HV, DK, DV, D = 2, 4, 16, 16, ref_cfg["hidden_size"]
    r = HV // HK
    out = {}
    for name, w in t.items():
        if ".mlp.gate_proj" in name or ".mlp.up_proj" in name or ".mlp.down_proj" in name:
            continue  # layer 1 is MoE here: its experts below
        if name.endswith("in_proj_qkvz.weight"):
            g = w.reshape(HK, 2 * DK + 2 * r * DV, D)
            q, k, v, z = g[:, :DK], g[:, DK:2 * DK], g[:, 2 * DK:2 * DK + r * DV], g[:, 2 * DK + r * DV:]
            base = name[:-len("in_proj_qkvz.weight")]
            out[base + "in_proj_qkv.weight"] = np.concatenate([q.reshape(-1, D), k.reshape(-1, D), v.reshape(-1, D)])
            out[base + "in_proj_z.weight"] = z.reshape(-1, D)
        elif name.endswith("in_proj_ba.weight"):
            g = w.reshape(HK, 2 * r, D)
            base = name[:-len("in_proj_ba.weight")]
            out[base + "in_proj_b.weight"], out[base + "in_proj_a.weight"] = g[:, :r].reshape(-1, D), g[:, r:].reshape(-1, D)
        else:
            out[name] = w
    p = "model.layers.1."
    for n, shape in ((p + "mlp.gate.weight", (8, D)), (p + "mlp.shared_expert_gate.weight", (1, D)),
                     (p + "mlp.shared_expert.gate_proj.weight", (48, D)), (p + "mlp.shared_expert.up_proj.weight", (48, D)),
                     (p + "mlp.shared_expert.down_proj.weight", (D, 48))):
        out[n] = rng.w(*shape)
    for e in range(8):
        out.update({p + f"mlp.experts.{e}.gate_proj.weight": rng.w(32, D), p + f"mlp.experts.{e}.up_proj.weight": rng.w(32, D),
                    p + f"mlp.experts.{e}.down_proj.weight": rng.w(D, 32)})
    # The fused form of the same weights for the reference forward.
    ref = dict(t)
    for k in list(ref):
        if k.startswith(p + "mlp."):
            del ref[k]
    ref.update({k: v for k, v in out.items() if k.startswith(p + "mlp.")})
    ckpt = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v for k, v in out.items()}
    ckpt["model.visual.patch_embed.proj.weight"] = rng.w(16, 12)
    text = {k: v for k, v in ref_cfg.items() if k not in ("model_type", "partial_rotary_factor", "rope_theta", "mlp_only_layers",
                                                            "decoder_sparse_step", "norm_topk_prob", "intermediate_size",
                                                            "full_attention_interval", "tie_word_embeddings")}
    text.update(model_type="qwen3_5_moe_text", rope_parameters={"rope_type": "default", "rope_theta": ref_cfg["rope_theta"],
                                                                 "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                                                                 "mrope_interleaved": True})
    cfg = dict(model_type="qwen3_5_moe", text_config=text, vision_config={"model_type": "qwen3_5_moe", "depth": 1},
               tie_word_embeddings=False)
    return cfg, ckpt, ref_cfg, ref


def qwen3_next_fp8_checkpoint(rng):
    """Qwen3-Next as its FP8 release ships: every projection (DeltaNet's fused in_proj_qkvz and
    in_proj_ba and out_proj, attention, experts, shared expert) in e4m3 with 128 x 128 block scales;
    the router, the shared expert's gate, conv1d, norms and the LM head as they were. Returns the
    config, the file's tensors and the reference's (dequantized)."""
    cfg, ref = qwen3_next_checkpoint(rng)
    return dict(cfg, quantization_config=FP8_CONFIG), fp8_projections(ref), ref


def qwen3_5_fp8_checkpoint(rng):
    """Qwen3.5-MoE's multimodal checkpoint with its attention, DeltaNet output, expert and shared
    expert projections in e4m3 with block scales (the separate in_proj_qkv/z/b/a kept as they were:
    the reference holds them fused). Returns as qwen3_5_checkpoint, the reference dequantized."""
    cfg, ckpt, ref_cfg, ref = qwen3_5_checkpoint(rng)
    out = {}
    for n, w in ckpt.items():
        if w.ndim == 2 and "proj.weight" in n and ".in_proj_" not in n and "visual" not in n:
            q, sc = quantize_fp8(w)
            out[n], out[n + "_scale_inv"] = q, sc
            ref["model." + n[len("model.language_model."):]] = dequant_fp8(q, sc)
        else:
            out[n] = w
    return dict(cfg, quantization_config=FP8_CONFIG), out, ref_cfg, ref  # at the top, as the release has it


def check_model(moerun, work, name, cfg, tensors, ref_tensors, convert_args, expect_format, ref_cfg=None):
    """Converts one checkpoint with `convert_args`, checks the experts' format `inspect` names, runs
    it, and compares with the float64 forward over `ref_tensors` (and `ref_cfg`, else the
    checkpoint's config). Returns the failures."""
    ref_cfg = ref_cfg or cfg
    hf, moe = os.path.join(work, name + "-hf"), os.path.join(work, name + "-moe")
    if not os.path.exists(hf):
        write_checkpoint(hf, cfg, tensors)
    r = run([moerun, "convert", "--from-hf", hf, "--out", moe, "--shards", "2", "--quiet"] + convert_args)
    if r.returncode:
        print(f"FAIL {name}: convert exit {r.returncode}: {r.stderr.strip()}")
        return 1
    info = run([moerun, "inspect", "--model", moe]).stdout
    fmt_ok = (f"experts {expect_format}" in info.splitlines()[0]) if expect_format else "experts " not in info.splitlines()[0]
    print(f"{'ok  ' if fmt_ok else 'FAIL'} {name}: experts stored as {expect_format or 'the dtype'} ({info.splitlines()[0]})")
    failures = 0 if fmt_ok else 1
    reqs, out, lg = (os.path.join(work, name + s) for s in ("-reqs.jsonl", "-out.jsonl", "-logits.jsonl"))
    write_requests(reqs, PROMPTS, STEPS)
    r = run([moerun, "infer", "--model", moe, "--input", reqs, "--output", out, "--logits-out", lg, "--quiet"])
    if r.returncode:
        print(f"FAIL {name}: infer exit {r.returncode}: {r.stderr.strip()}")
        return failures + 1
    ours = {json.loads(l)["id"]: json.loads(l)["output_tokens"] for l in open(out)}
    ours_logits = read_logits(lg)
    fwd = {"glm4_moe": glm4_forward, "minimax_m2": minimax_forward, "qwen3_next": qwen3_next_forward, "glm_moe_dsa": deepseek_forward}.get(
        ref_cfg["model_type"], deepseek_forward if "deepseek" in ref_cfg["model_type"] else forward)
    worst, conditioned = 0.0, (0.0, 0.0, FLOAT32_TOL)
    for i, prompt in enumerate(PROMPTS):
        ids, ref = list(prompt), []
        for _ in range(STEPS):
            ref.append(fwd(ref_cfg, ref_tensors, ids)[-1])
            ids.append(int(np.argmax(ref[-1])))
        want, got = ids[len(prompt):], ours[f"p{i}"]
        errors = [relative_error(a, b) for a, b in zip(ours_logits[f"p{i}"], ref)]
        worst = max([worst] + errors)
        conditioned = max(conditioned, conditioned_worst(errors, step_bars(ref, perturbed_steps(fwd, ref_cfg, ref_tensors, ids, len(prompt)))))
        ok = got == want[:len(got)] and len(got) > 0
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: prompt {i} ({len(prompt)} tokens): tokens {got}, float64 reference {want}")
    ok = worst <= REL_TOL
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: logits within {REL_TOL} of the float64 reference (worst relative error {worst:.2e})")
    ok = conditioned[0] <= 1.0
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: every step's logits within {FLOAT32_TOL} of the float64 reference, or {FLOOR_FACTOR:g}x "
          f"what half-ulp weight changes move it (worst {conditioned[1]:.2e} against a bar of {conditioned[2]:.2e})")
    return failures


def perturbed_steps(fwd, cfg, tensors, ids, prompt_len):
    """The reference's step logits along `ids` (prompt and greedy tokens) with every float weight
    moved by half a float32 ulp, for FLOOR_SEEDS draws: one causal forward each."""
    out = []
    for seed in range(FLOOR_SEEDS):
        rng = np.random.default_rng(seed)
        moved = {n: (w.astype(np.float64) * half_ulp_factors(w.shape, rng) if w.dtype.kind == "f" else w) for n, w in tensors.items()}
        out.append(fwd(cfg, moved, ids[:-1])[prompt_len - 1:])
    return out


def bad_family_configs(moerun, work):
    """GLM-4.5, MiniMax-M2 and Qwen3-Next configs convert cannot follow: exit 3, one line naming config.json's
    field (or the tensor it leaves without a place), nothing written (after check_model wrote the checkpoints)."""
    def set_field(model, **fields):
        def edit(d):
            path = os.path.join(d, "config.json")
            cfg = json.load(open(path))
            cfg.update(fields)
            json.dump(cfg, open(path, "w"))
            return "config.json"
        return model, edit
    cases = [("GLM-4.5, partial_rotary_factor 0.01 (no rotated dim)", "partial_rotary_factor", set_field("glm4_moe", partial_rotary_factor=0.01)),
             ("GLM-4.5, an odd number of rotated dims", "partial_rotary_factor", set_field("glm4_moe", partial_rotary_factor=0.55)),
             ("MiniMax-M2, rotary_dim past head_dim", "rotary_dim", set_field("minimax_m2", rotary_dim=64)),
             ("MiniMax-M2, per-head q/k norms", "qk_norm_type", set_field("minimax_m2", qk_norm_type="per_head")),
             ("MiniMax-M2, softmax scores", "scoring_func", set_field("minimax_m2", scoring_func="softmax")),
             ("Qwen3-Next, value heads not a multiple of key heads", "linear_num_value_heads",
              set_field("qwen3_next", linear_num_value_heads=3)),
             ("Qwen3-Next, a layer kind of neither", "layer_types", set_field("qwen3_next", layer_types=["linear_attention"] * 3 + ["mamba"])),
             # Size 0 skips only a shared expert that holds nothing (as transformers saves one).
             ("Qwen3-Next, shared_expert_intermediate_size 0 beside a shared expert with weights", "has no place",
              set_field("qwen3_next", shared_expert_intermediate_size=0)),
             # GLM-5's indexer schedule, without indexer_types (issue 77): the field named is the one given.
             ("GLM-5, index_topk_pattern of 2 layers for 3", "field index_topk_pattern has 2 entries, expected num_hidden_layers = 3",
              set_field("glm_moe_dsa_seed19", indexer_types=None, index_topk_pattern="FS")),
             ("GLM-5, index_topk_freq 0", "field index_topk_freq is 0, expected >= 1", set_field("glm_moe_dsa_seed19", indexer_types=None, index_topk_freq=0)),
             ("GLM-5, index_topk_freq -2", "field index_topk_freq is -2", set_field("glm_moe_dsa_seed19", indexer_types=None, index_topk_freq=-2))]
    failures = 0
    for i, (what, field, (model, edit)) in enumerate(cases):
        ok, err, rc = convert_refused(moerun, os.path.join(work, model + "-hf"), os.path.join(work, f"bad-family-{i}"), edit, field)
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} bad config, {what}: exit {rc}: {err}")
    return failures


def stacked_experts(tensors, module=None):
    """The same checkpoint with each layer's experts stacked as transformers 5.x saves them and as the
    Hub ships Qwen3.5/3.6: MODULE.gate_up_proj [E, 2ff, d] (the gate's rows, then the up's) and
    MODULE.down_proj [E, d, ff], where MODULE is the per-expert names' own module (X.experts.) or
    `module` in its place (e.g. mlp.experts. for a family whose per-expert names use another)."""
    import re
    pat = re.compile(r"(.*\.)([a-z_]+\.experts\.)(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight$")
    out, groups = {}, {}
    for n, w in tensors.items():
        m = pat.match(n)
        if not m:
            out[n] = w
            continue
        key = m.group(1) + (module or m.group(2))
        role = {"gate_proj": "w1", "w1": "w1", "up_proj": "w3", "w3": "w3", "down_proj": "w2", "w2": "w2"}[m.group(4)]
        groups.setdefault(key, {}).setdefault(int(m.group(3)), {})[role] = w
    for key, experts in groups.items():
        order = sorted(experts)
        out[key + "gate_up_proj"] = np.stack([np.concatenate([experts[e]["w1"], experts[e]["w3"]]) for e in order])
        out[key + "down_proj"] = np.stack([experts[e]["w2"] for e in order])
    return out


def fp8_stacked(stacked, ref, ref_prefix=""):
    """Stacked float experts quantized as transformers 5.x's FineGrainedFP8 stores them: each expert's
    gate_up_proj [2ff, d] and down_proj [d, ff] in e4m3 with 128 x 128 block scales over that matrix
    (gate_up_proj_scale_inv [E, ceil(2ff/128), ceil(d/128)]); `ref`'s per-expert tensors (names the
    stacked prefix with `ref_prefix` in place of model.language_model.) become what those bytes stand for."""
    out = {}
    for n, w in stacked.items():
        if not (n.endswith("experts.gate_up_proj") or n.endswith("experts.down_proj")) or w.ndim != 3:
            out[n] = w
            continue
        qs, scs = zip(*(quantize_fp8(w[e]) for e in range(w.shape[0])))
        out[n], out[n + "_scale_inv"] = np.stack(qs).view(Fp8), np.stack(scs)
        base = n.replace("model.language_model.", ref_prefix or "model.").rsplit(".", 1)[0]  # ...mlp.experts
        for e in range(w.shape[0]):
            dq = dequant_fp8(qs[e], scs[e])
            if n.endswith("down_proj"):
                ref[f"{base}.{e}.down_proj.weight"] = dq
            else:
                ff = dq.shape[0] // 2
                ref[f"{base}.{e}.gate_proj.weight"], ref[f"{base}.{e}.up_proj.weight"] = dq[:ff], dq[ff:]
    return out


def stacked_checkpoints(moerun, work):
    """Experts stacked over the experts (issue 64): Qwen3.5-MoE as the Hub ships it (under
    model.language_model.), Qwen3-MoE as transformers 5.x saves it (mlp.experts.), MiniMax-M2 under
    its own module (block_sparse_moe.experts.) and under mlp.experts.: the per-expert conversions'
    reference, and a wrong shape named as the checkpoint spells the tensor."""
    failures = 0
    cfg, t, ref_cfg, ref = qwen3_5_checkpoint(Rng(13))
    failures += check_model(moerun, work, "qwen3_5_moe_stacked", cfg, stacked_experts(t), ref, [], None, ref_cfg)
    cfg, t = qwen3_checkpoint(Rng(7))
    failures += check_model(moerun, work, "qwen3_moe_stacked", cfg, stacked_experts(t), t, [], None)
    cfg, t = minimax_checkpoint(Rng(11))
    failures += check_model(moerun, work, "minimax_m2_stacked", cfg, stacked_experts(t), t, [], None)
    failures += check_model(moerun, work, "minimax_m2_stacked_mlp", cfg, stacked_experts(t, "mlp.experts."), t, [], None)
    # The same model either way: every dataset and attribute of the expert shards equal the per-expert
    # conversion's (converted earlier in main), bar the checkpoint's fingerprint; so the cache, hot
    # swap and every rank count serve them as they serve those.
    for name in ("qwen3_5_moe", "qwen3_moe", "minimax_m2"):
        diffs = []
        for shard in ("experts-00000.h5", "experts-00001.h5"):
            with h5py.File(os.path.join(work, name + "-moe", shard)) as a, h5py.File(os.path.join(work, name + "_stacked-moe", shard)) as b:
                def walk(g, h, path):
                    for k, v in g.attrs.items():
                        if k != "converted_from" and not np.array_equal(np.asarray(v), np.asarray(h.attrs.get(k))):
                            diffs.append(path + "@" + k)
                    for k in g:
                        if isinstance(g[k], h5py.Dataset):
                            if not np.array_equal(g[k][()], h[k][()]):
                                diffs.append(path + k)
                        else:
                            walk(g[k], h[k], path + k + "/")
                walk(a, b, shard + ":/")
        failures += bool(diffs)
        print(f"{'ok  ' if not diffs else 'FAIL'} {name}: the stacked conversion's expert shards equal the per-expert one's {diffs[:3]}")
    # Stacked fp8, as transformers 5.x saves a FineGrainedFP8 model: Qwen3-MoE with experts 128 wide
    # (the gate's rows end on a block: kept as shipped, w1 and w3 each their half of the block grid),
    # and Qwen3.5 with experts 32 wide (a block holds gate and up rows: dequantized exactly).
    cfg = dict(qwen3_checkpoint(Rng(7))[0], hidden_size=128, moe_intermediate_size=128, intermediate_size=256, head_dim=32,
               num_experts=6, sliding_window=None, use_sliding_window=False)
    t = qwen3_tensors(Rng(41), cfg)
    ref = dict(t)
    failures += check_model(moerun, work, "qwen3_moe_stacked_fp8", dict(cfg, quantization_config=FP8_CONFIG),
                            fp8_stacked(stacked_experts(t), ref), ref, [], "fp8-block", cfg)
    cfg, t, ref_cfg, ref = qwen3_5_checkpoint(Rng(43))
    failures += check_model(moerun, work, "qwen3_5_moe_stacked_fp8", dict(cfg, quantization_config=FP8_CONFIG),
                            fp8_stacked(stacked_experts(t), ref), ref, [], None, ref_cfg)
    cfg, t, _, _ = qwen3_5_checkpoint(Rng(13))
    s = stacked_experts(t)
    no_scales = fp8_stacked(stacked_experts(t), {})
    gu = "model.language_model.layers.0.mlp.experts.gate_up_proj"
    del no_scales[gu + "_scale_inv"]
    down = "model.language_model.layers.1.mlp.experts.down_proj"
    s[down] = s[down][:, :, :16].copy()  # [8, 64, 32] -> [8, 64, 16]
    return failures + refused_checkpoints(moerun, work, "bad-stacked", [
        ("a stacked down_proj of the wrong shape", cfg, s, down + " has shape [8,64,16], config.json says [8,64,32]"),
        ("a missing expert, per-expert", cfg, {k: v for k, v in t.items() if ".experts.3.up_proj" not in k},
         "the checkpoint has no tensor model.language_model.layers.0.mlp.experts.3.up_proj.weight"),
        ("stacked fp8 experts without their scales", dict(cfg, quantization_config=FP8_CONFIG), no_scales,
         gu + " is F8_E4M3 but the checkpoint has no " + gu + "_scale_inv")])


def end_tokens(moerun, work):
    """generation_config.json's eos_token_id list (issue 65): every id ends generation. The token the
    converted Qwen3-MoE generates first for prompt 0 listed as a second end token: the run stops
    there, finish_reason eos, and inspect names both."""
    first = json.loads(open(os.path.join(work, "qwen3_moe-out.jsonl")).readline())["output_tokens"][0]
    src = os.path.join(work, "end-tokens-hf")
    shutil.copytree(os.path.join(work, "qwen3_moe-hf"), src)
    json.dump({"eos_token_id": [127, first]}, open(os.path.join(src, "generation_config.json"), "w"))
    out = os.path.join(work, "end-tokens-moe")
    r = run([moerun, "convert", "--from-hf", src, "--out", out, "--quiet"])
    info = run([moerun, "inspect", "--model", out]).stdout
    reqs, res = os.path.join(work, "end-tokens.jsonl"), os.path.join(work, "end-tokens-out.jsonl")
    write_requests(reqs, PROMPTS[:1], STEPS)
    r2 = run([moerun, "infer", "--model", out, "--input", reqs, "--output", res, "--quiet"])
    got = json.loads(open(res).readline()) if r2.returncode == 0 else {}
    ok = r.returncode == 0 and f"eos 127,{first}" in info and got.get("output_tokens") == [first] and got.get("finish_reason") == "eos"
    print(f"{'ok  ' if ok else 'FAIL'} end tokens from generation_config.json: [127, {first}] stop the run at {first} "
          f"({got.get('output_tokens')}, {got.get('finish_reason')}) {r.stderr.strip()}{r2.stderr.strip()}")
    return not ok


def refused_checkpoints(moerun, work, tag, cases):
    """Each case (what, config, tensors, what the one error line must hold) written and converted:
    exit 3, one line holding it, nothing written. Returns the failures."""
    failures = 0
    for i, (what, cfg, t, named) in enumerate(cases):
        src = os.path.join(work, f"{tag}-src-{i}")
        write_checkpoint(src, cfg, t)
        ok, err, rc = convert_refused(moerun, src, os.path.join(work, f"{tag}-{i}"), lambda d, n=named: n, "")
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} bad checkpoint, {what}: exit {rc}: {err}")
    return failures


def bad_native_checkpoints(moerun, work):
    """MXFP4 and fp8 checkpoints that cannot be read as shipped: exit 3, one line naming the file and
    the tensor or field, nothing written."""
    g_cfg, g_t = gpt_oss_checkpoint(Rng(7))
    f_cfg, f_t, _ = qwen3_fp8_checkpoint(Rng(9))
    e = "model.layers.2.mlp.experts.3.down_proj.weight"
    nan_scale = g_t["model.layers.1.mlp.experts.down_proj_scales"].copy()
    nan_scale[4, 10, 1] = 255
    nan_code = f_t[e].copy()
    nan_code[7, 9] = 0x7f
    no_scales = {k: v for k, v in f_t.items() if k != e + "_scale_inv"}
    block64 = dict(f_cfg, quantization_config=dict(f_cfg["quantization_config"], weight_block_size=[64, 64]))
    cases = [  # what, config, tensors, what the one error line must hold
        ("an MXFP4 scale of 255", g_cfg, dict(g_t, **{"model.layers.1.mlp.experts.down_proj_scales": nan_scale}),
         "model.layers.1.mlp.experts.down_proj_scales[4] contains an E8M0 scale of 255 (NaN) at [10,1]"),
        ("an fp8 weight without its scales", f_cfg, no_scales, e + " is F8_E4M3 but the checkpoint has no " + e + "_scale_inv"),
        ("fp8 scales of the wrong shape", f_cfg, dict(f_t, **{e + "_scale_inv": np.ones((2, 1), np.float32)}),
         e + "_scale_inv has shape [2,1], expected [2,2]"),
        ("an e4m3 NaN in an expert", f_cfg, dict(f_t, **{e: nan_code}), e + " contains an e4m3 NaN at [7,9]"),
        ("an infinite fp8 scale", f_cfg, dict(f_t, **{e + "_scale_inv": np.array([[1e-3, np.inf], [1e-3, 1e-3]], np.float32)}),
         e + "_scale_inv has inf at 1"),
        ("64 x 64 fp8 blocks", block64, f_t, "quantization_config.weight_block_size is [64,64], expected [128, 128]"),
    ]
    return refused_checkpoints(moerun, work, "bad", cases)


def main():
    moerun, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = 0
    cfg, t = qwen3_checkpoint(Rng(7))
    failures += check_model(moerun, work, "qwen3_moe", cfg, t, t, [], None)
    cfg, t = gpt_oss_checkpoint(Rng(7))
    failures += check_model(moerun, work, "gpt_oss", cfg, t, t, [], "mxfp4")
    # The same checkpoint dequantized at convert: the same reference.
    os.symlink(os.path.join(work, "gpt_oss-hf"), os.path.join(work, "gpt_oss_dequantized-hf"))
    failures += check_model(moerun, work, "gpt_oss_dequantized", cfg, t, t, ["--quantize", "none"], None)
    cfg, t, ref = qwen3_fp8_checkpoint(Rng(9))
    failures += check_model(moerun, work, "qwen3_moe_fp8", cfg, t, ref, [], "fp8-block")
    cfg, t, ref = deepseek_checkpoint(Rng(5), v3=False)
    failures += check_model(moerun, work, "deepseek_v2", cfg, t, ref, [], None)
    cfg, t, ref = deepseek_checkpoint(Rng(6), v3=True)
    failures += check_model(moerun, work, "deepseek_v3_fp8", cfg, t, ref, [], "fp8-block")
    # V3 without the q_lora path and with two shared experts, float32: convert once read past a 1-D
    # dataset's shape here (issue 42); the sanitizer pass runs this test.
    cfg, t, ref = deepseek_checkpoint(Rng(8), v3=True, q_lora=False, shared=2, fp8=False)
    failures += check_model(moerun, work, "deepseek_v3_no_q_lora", cfg, t, ref, [], None)
    # DeepSeek-V3.2: 4 positions per query, so the 11- and 19-token prompts attend sparsely.
    for seed in (17, 18):
        cfg, t = deepseek_v32_checkpoint(Rng(seed), topk=4)
        failures += check_model(moerun, work, f"deepseek_v32_seed{seed}", cfg, t, t, [], None)
    # ... as an fp8 checkpoint (V3.2 ships one): the experts kept as fp8-block, the rest (the indexer's
    # weights_proj among them) dequantized at convert.
    cfg, ref = deepseek_v32_checkpoint(Rng(21), topk=4)
    t = fp8_projections(ref)
    failures += check_model(moerun, work, "deepseek_v32_fp8", dict(cfg, quantization_config=FP8_CONFIG), t, ref, [], "fp8-block", cfg)
    # GLM-5: the indexer's RoPE interleaved, and a layer that shares the choice of the one before.
    for seed in (19, 20):
        cfg, t = glm_moe_dsa_checkpoint(Rng(seed), topk=4)
        failures += check_model(moerun, work, f"glm_moe_dsa_seed{seed}", cfg, t, t, [], None)
    cfg, t = glm4_checkpoint(Rng(10))
    failures += check_model(moerun, work, "glm4_moe", cfg, t, t, [], None)
    cfg, t = minimax_checkpoint(Rng(11))
    failures += check_model(moerun, work, "minimax_m2", cfg, t, t, [], None)
    # The config as transformers 5.x saves it: no rotary_dim, the factor (here a quarter, 8 of 32
    # dims) and theta inside rope_parameters.
    theta = cfg.pop("rope_theta")
    del cfg["rotary_dim"]
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 0.25}
    failures += check_model(moerun, work, "minimax_m2_hf5_config", cfg, t, t, [], None)
    cfg, t = qwen3_next_checkpoint(Rng(12))
    failures += check_model(moerun, work, "qwen3_next", cfg, t, t, [], None)
    # No shared expert, as transformers saves it: size 0, zero-element matrices and the gate kept.
    cfg, t = qwen3_next_checkpoint(Rng(16))
    cfg["shared_expert_intermediate_size"] = 0
    for n in [n for n in t if ".mlp.shared_expert." in n]:
        t[n] = np.zeros((0, t[n].shape[1]) if "down_proj" not in n else (t[n].shape[0], 0), np.float32)
    failures += check_model(moerun, work, "qwen3_next_no_shared", cfg, t, t, [], None)
    cfg, t, ref_cfg, ref = qwen3_5_checkpoint(Rng(13))
    failures += check_model(moerun, work, "qwen3_5_moe", cfg, t, ref, [], None, ref_cfg)
    cfg, t, ref = qwen3_next_fp8_checkpoint(Rng(14))
    failures += check_model(moerun, work, "qwen3_next_fp8", cfg, t, ref, [], "fp8-block")
    cfg, t, ref_cfg, ref = qwen3_5_fp8_checkpoint(Rng(15))
    failures += check_model(moerun, work, "qwen3_5_moe_fp8", cfg, t, ref, [], "fp8-block", ref_cfg)
    # fp8 where the family ships it (MiniMax-M2; GLM-4.5/4.6-FP8): every projection, experts kept as shipped.
    # (MiniMax's experts 64 wide here: the fp8 kernels take whole groups of 32.)
    for name, make in (("minimax_m2_fp8", lambda r: minimax_checkpoint(r, FF=64)), ("glm4_moe_fp8", glm4_checkpoint)):
        cfg, ref = make(Rng(33))
        t = fp8_projections(ref)
        failures += check_model(moerun, work, name, dict(cfg, quantization_config=FP8_CONFIG), t, ref, [], "fp8-block", cfg)
    failures += stacked_checkpoints(moerun, work)
    failures += end_tokens(moerun, work)
    failures += bad_native_checkpoints(moerun, work)
    failures += bad_family_configs(moerun, work)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

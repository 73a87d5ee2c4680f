#!/usr/bin/env python3
"""A Mixtral-shaped Hugging Face checkpoint (config.json + model.safetensors) written with numpy
alone, streamed tensor by tensor, so it can be larger than memory. Each tensor is a tiled random
block (finite, not constant); norms are ones.

usage: make_hf_checkpoint.py DIR [--vocab V] [--hidden D] [--layers L] [--heads H] [--kv-heads KV]
                             [--head-dim HD] [--intermediate FF] [--experts E]
"""
import argparse
import json
import os
import struct
import zlib

import numpy as np

a = argparse.ArgumentParser()
a.add_argument("dir")
for name, default in (("vocab", 256), ("hidden", 64), ("layers", 2), ("heads", 4), ("kv-heads", 2), ("head-dim", 16),
                      ("intermediate", 96), ("experts", 4)):
    a.add_argument("--" + name, type=int, default=default)
o = a.parse_args()
V, D, L, H, KV, HD, FF, E = o.vocab, o.hidden, o.layers, o.heads, o.kv_heads, o.head_dim, o.intermediate, o.experts
os.makedirs(o.dir, exist_ok=True)
cfg = dict(model_type="mixtral", architectures=["MixtralForCausalLM"], vocab_size=V, hidden_size=D, num_hidden_layers=L,
           num_attention_heads=H, num_key_value_heads=KV, head_dim=HD, intermediate_size=FF, num_local_experts=E,
           num_experts_per_tok=2, max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=1e6, bos_token_id=1,
           eos_token_id=2, tie_word_embeddings=False, hidden_act="silu", sliding_window=None)
json.dump(cfg, open(os.path.join(o.dir, "config.json"), "w"))
shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
for l in range(L):
    p = f"model.layers.{l}."
    shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                   p + "self_attn.q_proj.weight": (H * HD, D), p + "self_attn.k_proj.weight": (KV * HD, D),
                   p + "self_attn.v_proj.weight": (KV * HD, D), p + "self_attn.o_proj.weight": (D, H * HD),
                   p + "block_sparse_moe.gate.weight": (E, D)})
    for e in range(E):
        for w, s in (("w1", (FF, D)), ("w3", (FF, D)), ("w2", (D, FF))):
            shapes[p + f"block_sparse_moe.experts.{e}.{w}.weight"] = s
header, off = {}, 0
for name, s in shapes.items():
    n = int(np.prod(s)) * 4
    header[name] = {"dtype": "F32", "shape": list(s), "data_offsets": [off, off + n]}
    off += n
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
block = (np.random.default_rng(5).standard_normal(1 << 16) / np.sqrt(D)).astype(np.float32)
with open(os.path.join(o.dir, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for name, s in shapes.items():
        n = int(np.prod(s))
        v = np.ones(n, np.float32) if name.endswith("norm.weight") else np.resize(np.roll(block, zlib.crc32(name.encode()) % 4099), n)
        f.write(v.tobytes())
print(f"{o.dir}: {off / 2**20:.1f} MiB of tensors")

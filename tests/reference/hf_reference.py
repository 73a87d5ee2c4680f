#!/usr/bin/env python3
"""moerun against Hugging Face transformers' MixtralForCausalLM (torch, CPU, fp32).

Makes a synthetic moe-hdf5 model with `moerun synth`, loads the same weights from the HDF5 files into
MixtralForCausalLM, runs greedy generation for a few prompts in both, and checks that every step's
logits agree (max |a-b| / max |b| <= 1e-4) and that the generated tokens are equal.

usage: hf_reference.py MOERUN_BIN WORKDIR
"""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import torch
from transformers import MixtralConfig, MixtralForCausalLM

REL_TOL = 1e-4


def load_hf_model(model_dir):
    with h5py.File(os.path.join(model_dir, "model.h5"), "r") as f:
        a = f.attrs
        cfg = MixtralConfig(
            vocab_size=int(a["vocab_size"]), hidden_size=int(a["hidden_size"]),
            intermediate_size=int(a["intermediate_size"]), num_hidden_layers=int(a["num_layers"]),
            num_attention_heads=int(a["num_heads"]), num_key_value_heads=int(a["num_kv_heads"]),
            max_position_embeddings=int(a["max_position"]), rms_norm_eps=float(a["rms_norm_eps"]),
            rope_theta=float(a["rope_theta"]), num_local_experts=int(a["num_experts"]),
            num_experts_per_tok=int(a["top_k"]), sliding_window=None, tie_word_embeddings=False,
            bos_token_id=int(a["bos_token_id"]), eos_token_id=int(a["eos_token_id"]))
        assert int(a["head_dim"]) == cfg.hidden_size // cfg.num_attention_heads, "HF Mixtral needs head_dim = d/heads"
        sd = {"model.embed_tokens.weight": f["embed_tokens"][()], "model.norm.weight": f["final_norm"][()],
              "lm_head.weight": f["lm_head"][()]}
        for l in range(cfg.num_hidden_layers):
            g = f[f"layers/{l}"]
            p = f"model.layers.{l}."
            sd[p + "input_layernorm.weight"] = g["attn_norm"][()]
            sd[p + "post_attention_layernorm.weight"] = g["ffn_norm"][()]
            for ours, theirs in (("wq", "q_proj"), ("wk", "k_proj"), ("wv", "v_proj"), ("wo", "o_proj")):
                sd[p + f"self_attn.{theirs}.weight"] = g[ours][()]
            sd[p + "block_sparse_moe.gate.weight"] = g["gate"][()]
    for name in sorted(os.listdir(model_dir)):
        if not (name.startswith("experts-") and name.endswith(".h5")):
            continue
        with h5py.File(os.path.join(model_dir, name), "r") as f:
            for l in f["layers"]:
                for e in f[f"layers/{l}/experts"]:
                    g = f[f"layers/{l}/experts/{e}"]
                    for w in ("w1", "w2", "w3"):
                        sd[f"model.layers.{l}.block_sparse_moe.experts.{e}.{w}.weight"] = g[w][()]
    model = MixtralForCausalLM(cfg).eval()
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in sd.items()}, strict=True)
    assert not missing and not unexpected
    return model


def hf_greedy(model, prompt, steps):
    ids = list(prompt)
    logits_per_step = []
    with torch.no_grad():
        for _ in range(steps):
            out = model(torch.tensor([ids]))
            lg = out.logits[0, -1].double().numpy()
            logits_per_step.append(lg)
            ids.append(int(np.argmax(lg)))
    return ids[len(prompt):], logits_per_step


def main():
    moerun, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model_dir = os.path.join(work, "model")
    subprocess.run([moerun, "synth", "--out", model_dir, "--layers", "3", "--experts", "8", "--top-k", "2",
                    "--hidden", "128", "--heads", "8", "--kv-heads", "2", "--head-dim", "16", "--intermediate", "256",
                    "--vocab", "300", "--max-position", "128", "--rope-theta", "500000", "--eos", "299",
                    "--shards", "3", "--seed", "7", "--quiet"], check=True)
    prompts = {"a": [1, 17, 42, 7, 99, 250, 3], "b": [1, 5], "c": [1] + list(range(20, 60))}
    steps = 6
    reqs = os.path.join(work, "reqs.jsonl")
    with open(reqs, "w") as f:
        for k, p in prompts.items():
            f.write(json.dumps({"id": k, "prompt_tokens": p, "max_new_tokens": steps}) + "\n")
    out, lg = os.path.join(work, "out.jsonl"), os.path.join(work, "logits.jsonl")
    subprocess.run([moerun, "infer", "--model", model_dir, "--input", reqs, "--output", out, "--logits-out", lg,
                    "--quiet", "--max-batch-tokens", "16"], check=True)
    ours_tokens = {r["id"]: r["output_tokens"] for r in map(json.loads, open(out))}
    ours_logits = {}
    for r in map(json.loads, open(lg)):
        ours_logits.setdefault(r["id"], []).append(np.array(r["logits"], dtype=np.float64))

    model = load_hf_model(model_dir)
    failures = 0
    worst = 0.0
    for k, p in prompts.items():
        ref_tokens, ref_logits = hf_greedy(model, p, steps)
        got = ours_tokens[k]
        n = min(len(got), steps)
        for i in range(len(ours_logits[k])):
            rel = np.max(np.abs(ours_logits[k][i] - ref_logits[i])) / np.max(np.abs(ref_logits[i]))
            worst = max(worst, rel)
            if rel > REL_TOL:
                print(f"FAIL {k} step {i}: logits relative error {rel:.3e} > {REL_TOL}")
                failures += 1
        if got != ref_tokens[:n] or n != steps:
            print(f"FAIL {k}: tokens {got} != reference {ref_tokens}")
            failures += 1
        else:
            print(f"ok   {k}: prompt {len(p)} tokens, generated {got}")
    print(f"worst logits relative error {worst:.3e} (tolerance {REL_TOL})")
    print(f"{len(prompts) - min(failures, len(prompts))} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""compressed-tensors INT4 against the compressed-tensors package itself (issue 64), out of CI: the
package needs torch 2.10, and CI's venv has Debian's torch 1.13 (launch/reference-2025.sh's venv has
both). For each scheme (symmetric and asymmetric; groups of 32, 64 and 128; bf16 and fp16 scales) a
Qwen3-MoE checkpoint whose linears the package's own PackedQuantizationCompressor packs (scales and
zero points from its calculate_qparams), with the quantization_config its QuantizationConfig dumps.
Checks that moerun convert reads it: dequantized (--quantize none), every expert matrix and every
packed dense matrix equals the package's decompress bit for bit; kept as shipped, the model runs,
inspect names int4, and np 3 gives the one-process tokens.

usage: int4_compressed_tensors.py MOERUN_BIN WORKDIR
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import torch
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
from compressed_tensors.quantization.utils import calculate_qparams
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from int4_reference import qwen3_int4_checkpoint  # noqa: E402  (its float weights and config)
from numpy_reference import Rng, qwen3_tensors  # noqa: E402

failures = 0


def check(ok, what):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}")


def as_f32(a):
    """A stored dataset as float32: bfloat16 bits (uint16) widened."""
    return (a.astype(np.uint32) << 16).view(np.float32) if a.dtype == np.uint16 else a.astype(np.float32)


def compress(w, group, symmetric, scale_dtype):
    args = QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=group, symmetric=symmetric)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    g = w.reshape(w.shape[0], -1, group)
    scale, zp = calculate_qparams(g.amin(-1), g.amax(-1), args)
    sd = {"weight": w.to(scale_dtype), "weight_scale": scale.to(scale_dtype)}
    if not symmetric:
        sd["weight_zero_point"] = zp
    packed = PackedQuantizationCompressor.compress(sd, scheme)
    return packed, PackedQuantizationCompressor.decompress(packed, scheme)["weight"], scheme


def checkpoint(d, group, symmetric, scale_dtype):
    """A Qwen3-MoE checkpoint (int4_reference's shape, the float weights as scale_dtype) with every
    linear but the router and the LM head packed by the package; returns {weight name: decompressed}."""
    cfg, _, _ = qwen3_int4_checkpoint(23, group, symmetric, "f16")
    t = {n: torch.from_numpy(w) for n, w in qwen3_tensors(Rng(23), cfg).items()}
    out, deq, scheme = {}, {}, None
    for n, w in t.items():
        m = n[:-len(".weight")]
        if n.endswith(".weight") and w.ndim == 2 and not m.endswith("mlp.gate") and m not in ("lm_head", "model.embed_tokens"):
            packed, deq[n], scheme = compress(w, group, symmetric, scale_dtype)
            out.update({f"{m}.{k}": v.contiguous() for k, v in packed.items()})
        else:
            out[n] = w.to(scale_dtype)
    cfg["quantization_config"] = QuantizationConfig(config_groups={"group_0": scheme}, format="pack-quantized",
                                                    quantization_status="compressed", ignore=["lm_head", "re:.*mlp\\.gate$"]).model_dump()
    os.makedirs(d)
    save_file(out, os.path.join(d, "model.safetensors"))
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"), default=str)
    return cfg, deq


def main():
    moerun, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    reqs = os.path.join(work, "reqs.jsonl")
    with open(reqs, "w") as f:
        for i, p in enumerate([[1, 5, 9, 13], [3, 100, 7, 2, 8]]):
            f.write(json.dumps({"id": f"p{i}", "prompt_tokens": p, "max_new_tokens": 6}) + "\n")
    for group, symmetric, dt in [(32, True, torch.bfloat16), (128, False, torch.float16), (64, True, torch.float16), (32, False, torch.bfloat16)]:
        tag = f"g{group}-{'sym' if symmetric else 'asym'}-{str(dt).split('.')[1]}"
        hf = os.path.join(work, tag + "-hf")
        cfg, deq = checkpoint(hf, group, symmetric, dt)
        none, kept = os.path.join(work, tag + "-none"), os.path.join(work, tag + "-kept")
        r = subprocess.run([moerun, "convert", "--from-hf", hf, "--out", none, "--quantize", "none", "--quiet"], capture_output=True, text=True)
        check(r.returncode == 0, f"{tag}: convert --quantize none {r.stderr.strip()}")
        if r.returncode:
            continue
        diffs, n = [], 0
        moe_layers = [l for l in range(cfg["num_hidden_layers"]) if l not in cfg["mlp_only_layers"]]
        for shard in sorted(glob.glob(os.path.join(none, "experts-*.h5"))):
            with h5py.File(shard) as f:
                for ls, layer in f["layers"].items():
                    for es, g in layer["experts"].items():
                        for ours, hfn in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                            want = deq[f"model.layers.{moe_layers[int(ls)]}.mlp.experts.{es}.{hfn}.weight"].float().numpy()
                            n += 1
                            if not np.array_equal(as_f32(g[ours][()]), want):
                                diffs.append(f"{ls}/{es}/{ours}")
        check(n > 0 and not diffs, f"{tag}: {n} expert matrices dequantized by convert equal compressed-tensors' decompress bit for bit {diffs[:3]}")
        with h5py.File(os.path.join(none, "model.h5")) as f:
            got = as_f32(f["layers/0/wq"][()]) if "layers/0/wq" in f else None
        want = deq["model.layers.0.self_attn.q_proj.weight"].float().numpy()
        check(got is not None and got.shape == want.shape and np.array_equal(got, want),
              f"{tag}: the packed q_proj, dequantized into the dense part, equals decompress bit for bit")
        r = subprocess.run([moerun, "convert", "--from-hf", hf, "--out", kept, "--quiet"], capture_output=True, text=True)
        info = subprocess.run([moerun, "inspect", "--model", kept], capture_output=True, text=True).stdout.splitlines()
        check(r.returncode == 0 and info and "experts int4" in info[0], f"{tag}: kept as shipped ({info[0] if info else r.stderr.strip()})")
        one, np3 = os.path.join(work, tag + "-1.jsonl"), os.path.join(work, tag + "-3.jsonl")
        r1 = subprocess.run([moerun, "infer", "--model", kept, "--input", reqs, "--output", one, "--quiet"], capture_output=True, text=True)
        r3 = subprocess.run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "3", moerun, "infer", "--model", kept, "--input", reqs,
                             "--output", np3, "--quiet"], capture_output=True, text=True, env=env)
        check(r1.returncode == 0 and r3.returncode == 0 and open(one).read() == open(np3).read(),
              f"{tag}: kept int4 runs, np 3 gives the one-process tokens {(r1.stderr + r3.stderr).strip()[-200:]}")
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

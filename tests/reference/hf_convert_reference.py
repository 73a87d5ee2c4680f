#!/usr/bin/env python3
"""`moerun convert` against Hugging Face transformers, for each supported family.

For Mixtral, Qwen2-MoE (also with dense MLP layers) and OLMoE: a tiny random model made with transformers (seeded, weights
scaled so routing is not decided by ties), saved with save_pretrained as sharded safetensors,
converted with `moerun convert`, run with `moerun infer --logits-out`. Every step's logits must agree
with the Hugging Face model's (max |a-b| / max |b| <= 1e-4) and the greedy tokens must be equal.
An fp8 Mixtral checkpoint (attention and expert weights in e4m3 with 128 x 128 block scales, as
Qwen3-FP8 and DeepSeek-V3 ship) keeps its experts as shipped and is checked against transformers
running the dequantized weights, np 3 bit for bit.
Then a bf16 checkpoint converts losslessly (`--dtype keep`), and bad checkpoints fail with exit 3
naming the file and tensor: a truncated safetensors file, a config that disagrees with the
weights, an unsupported architecture.

usage: hf_convert_reference.py MOERUN_BIN WORKDIR
"""
import json
import os
import shutil
import struct
import sys

import h5py
import numpy as np
import torch
from reference_common import convert_refused, dequant_fp8, hf_greedy, infer_against, inspect_total, quantize_fp8, run, write_safetensors
from transformers import (MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM)

REL_TOL = 1e-4
PROMPTS = [[1, 5, 9, 13], [3, 100, 7], [2, 64, 65, 66, 67, 68, 69, 70]]
STEPS = 6
COMMON = dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=127,
              tie_word_embeddings=False)


def families():
    return {
        "mixtral": (MixtralForCausalLM, MixtralConfig(**COMMON, intermediate_size=96, num_local_experts=6, num_experts_per_tok=2,
                                                      sliding_window=None)),
        "qwen2_moe": (Qwen2MoeForCausalLM, Qwen2MoeConfig(**COMMON, intermediate_size=96, moe_intermediate_size=48,
                                                          shared_expert_intermediate_size=80, num_experts=6,
                                                          num_experts_per_tok=2, norm_topk_prob=False)),
        # Dense MLP layers: decoder_sparse_step 2 makes layers 0 and 2 dense, mlp_only_layers layer 3 too.
        "qwen2_moe-dense": (Qwen2MoeForCausalLM, Qwen2MoeConfig(**dict(COMMON, num_hidden_layers=5), intermediate_size=96,
                                                                moe_intermediate_size=48, shared_expert_intermediate_size=80,
                                                                num_experts=6, num_experts_per_tok=2, norm_topk_prob=True,
                                                                decoder_sparse_step=2, mlp_only_layers=[3])),
        "olmoe": (OlmoeForCausalLM, OlmoeConfig(**COMMON, intermediate_size=48, num_experts=6, num_experts_per_tok=2,
                                                norm_topk_prob=False)),
    }


def make_model(cls, cfg, seed):
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:  # 1/sqrt(fan_in): activations O(1), gate logits well apart
                p.normal_(0.0, 1.0 / np.sqrt(p.shape[1]))
            else:  # norms and biases: near their defaults, but not equal to them
                p.copy_((1.0 if "norm" in name or "layernorm" in name else 0.0) + 0.1 * torch.randn_like(p))
    return model


def main():
    moerun, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    for fam, (cls, cfg) in families().items():
        model = make_model(cls, cfg, seed=7)
        hf_dir, out_dir = os.path.join(work, fam + "-hf"), os.path.join(work, fam + "-moe")
        model.save_pretrained(hf_dir, max_shard_size="200KB", safe_serialization=True)
        shards = [f for f in os.listdir(hf_dir) if f.endswith(".safetensors")]
        r = run([moerun, "convert", "--from-hf", hf_dir, "--out", out_dir, "--shards", "3"])
        check(r.returncode == 0, f"{fam}: convert {len(shards)} safetensors shards (exit {r.returncode}) {r.stderr.strip()[-300:]}")
        if r.returncode:
            continue
        with h5py.File(os.path.join(out_dir, "model.h5"), "r") as f:
            arch = f.attrs["architecture"]
            arch = arch.decode() if isinstance(arch, bytes) else arch
            check(arch == cfg.model_type, f"{fam}: architecture attribute {arch}")
        total = inspect_total(moerun, out_dir)
        hf_total = sum(p.numel() for p in model.parameters())
        check(total == hf_total, f"{fam}: inspect counts {total} parameters, transformers {hf_total}")
        got = infer_against(check, moerun, work, fam, out_dir, PROMPTS, STEPS, [hf_greedy(model, p, STEPS) for p in PROMPTS], REL_TOL)
        if not got:
            continue
        reqs, out, logits = got
        # The distributed runtime (1 router, 2 expert ranks) gives the same bytes, the variants included
        # (with one micro-batch, as the single process runs by default: the same GEMM shapes).
        mpi = os.environ.get("MPIEXEC", "mpirun")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        r = run([mpi, "--oversubscribe", "--bind-to", "none", "-np", "3", moerun, "infer", "--model", out_dir, "--input", reqs,
                 "--output", out + ".np3", "--logits-out", logits + ".np3", "--quiet", "--micro-batches", "1"], env=env)
        check(r.returncode == 0 and open(out).read() == open(out + ".np3").read() and open(logits).read() == open(logits + ".np3").read(),
              f"{fam}: mpirun -np 3 gives the same tokens and logits, bit for bit {r.stderr.strip()[-200:]}")
        # Interrupted conversions: the files already finished are kept, the rest made again.
        os.remove(os.path.join(out_dir, "experts-00002.h5"))
        os.remove(os.path.join(out_dir, "model.h5"))
        r = run([moerun, "convert", "--from-hf", hf_dir, "--out", out_dir, "--shards", "3"])
        check(r.returncode == 0 and "2 file(s) written, 2 kept from an earlier run" in r.stderr,
              f"{fam}: a rerun keeps the finished files ({r.stderr.strip().splitlines()[0] if r.stderr.strip() else r.returncode})")
        r = run([moerun, "infer", "--model", out_dir, "--input", reqs, "--output", out + ".2", "--quiet"])
        check(r.returncode == 0 and open(out).read() == open(out + ".2").read(), f"{fam}: the resumed conversion gives the same tokens")

    # fp8: experts kept as shipped (fp8-block), the attention weights dequantized at convert; the
    # reference is transformers' Mixtral with every weight dequantized (e4m3 * scale in float32).
    cls, cfg = families()["mixtral"]
    model = make_model(cls, cfg, seed=11)
    tensors = {}
    with torch.no_grad():
        for n, p in model.state_dict().items():
            w = p.numpy()
            if w.ndim == 2 and ("self_attn" in n or ".experts." in n):
                q, sc = quantize_fp8(w)
                tensors[n], tensors[n + "_scale_inv"] = q, sc
                p.copy_(torch.from_numpy(dequant_fp8(q, sc).astype(np.float32)))
            else:
                tensors[n] = w.copy()
    hf_dir, out_dir = os.path.join(work, "fp8-hf"), os.path.join(work, "fp8-moe")
    os.makedirs(hf_dir)
    config = dict(cfg.to_dict(), quantization_config={"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                                      "weight_block_size": [128, 128]})
    json.dump(config, open(os.path.join(hf_dir, "config.json"), "w"))
    write_safetensors(os.path.join(hf_dir, "model.safetensors"), tensors)
    r = run([moerun, "convert", "--from-hf", hf_dir, "--out", out_dir, "--shards", "2"])
    check(r.returncode == 0 and "kept as shipped, fp8" in r.stderr, f"fp8: convert keeps the experts as shipped (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    if r.returncode == 0:
        head = run([moerun, "inspect", "--model", out_dir]).stdout.splitlines()[0]
        check("experts fp8-block" in head, f"fp8: {head}")
        got = infer_against(check, moerun, work, "fp8", out_dir, PROMPTS, STEPS, [hf_greedy(model, p, STEPS) for p in PROMPTS], REL_TOL)
        if got:
            reqs, out, logits = got
            mpi = os.environ.get("MPIEXEC", "mpirun")
            env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            r = run([mpi, "--oversubscribe", "--bind-to", "none", "-np", "3", moerun, "infer", "--model", out_dir, "--input", reqs,
                     "--output", out + ".np3", "--logits-out", logits + ".np3", "--quiet"], env=env)
            check(r.returncode == 0 and open(out).read() == open(out + ".np3").read() and open(logits).read() == open(logits + ".np3").read(),
                  f"fp8: mpirun -np 3 gives the same tokens and logits, bit for bit {r.stderr.strip()[-200:]}")

    # bf16 checkpoints stay bf16, bit for bit.
    cls, cfg = families()["mixtral"]
    model = make_model(cls, cfg, seed=3).to(torch.bfloat16)
    hf_dir, out_dir = os.path.join(work, "bf16-hf"), os.path.join(work, "bf16-moe")
    model.save_pretrained(hf_dir, safe_serialization=True)
    r = run([moerun, "convert", "--from-hf", hf_dir, "--out", out_dir, "--quiet"])
    check(r.returncode == 0, f"bf16: convert (exit {r.returncode}) {r.stderr.strip()}")
    if r.returncode == 0:
        sd = model.state_dict()
        with h5py.File(os.path.join(out_dir, "model.h5"), "r") as f:
            check(f.attrs["dtype"] in ("bfloat16", b"bfloat16"), "bf16: the model's dtype is bfloat16")
            wq = f["layers/1/wq"][()]
            want = sd["model.layers.1.self_attn.q_proj.weight"].view(torch.int16).numpy().view(np.uint16)
            check(wq.dtype == np.uint16 and np.array_equal(wq, want), "bf16: wq bits equal the checkpoint's")
        with h5py.File(os.path.join(out_dir, "experts-00000.h5"), "r") as f:
            w2 = f["layers/0/experts/3/w2"][()]
            want = sd["model.layers.0.block_sparse_moe.experts.3.w2.weight"].view(torch.int16).numpy().view(np.uint16)
            check(np.array_equal(w2, want), "bf16: an expert's bits equal the checkpoint's")
        r = run([moerun, "infer", "--model", out_dir, "--input", os.path.join(work, "mixtral-reqs.jsonl"), "--output",
                 os.path.join(work, "bf16-out.jsonl"), "--quiet"])
        check(r.returncode == 0, f"bf16: infer runs ({r.stderr.strip()[-200:]})")

    # Bad checkpoints: exit 3, one line naming the file and the tensor, nothing written.
    src = os.path.join(work, "mixtral-hf")

    def bad_case(name, edit, pattern):
        ok, err, rc = convert_refused(moerun, src, os.path.join(work, "bad-" + name), edit, pattern)
        check(ok, f"bad checkpoint, {name}: exit {rc}: {err}")

    def truncate(d):
        index = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
        f = os.path.join(d, index["model.layers.1.block_sparse_moe.experts.5.w2.weight"])
        os.truncate(f, os.path.getsize(f) - 100)
        return os.path.basename(f)
    bad_case("truncated safetensors", truncate, "(truncated?)")

    def config_edit(field, value, named):
        """An edit of config.json; the error must contain `named`."""
        def edit(d):
            c = json.load(open(os.path.join(d, "config.json")))
            c[field] = value
            json.dump(c, open(os.path.join(d, "config.json"), "w"))
            return named
        return edit
    bad_case("config with fewer layers than the weights", config_edit("num_hidden_layers", 1, "model.layers.1."),
             "has no place in a mixtral model")
    bad_case("config with more experts than the weights", config_edit("num_local_experts", 7, "experts.6"),
             "the checkpoint has no tensor")
    bad_case("shape mismatch", config_edit("intermediate_size", 100, ".safetensors: tensor model.layers.0.block_sparse_moe.experts.0"
                                           ".w1.weight has shape [96,64], config.json says [100,64]"), "config.json says")
    bad_case("unsupported architecture", config_edit("model_type", "llama", "mixtral, qwen2_moe, olmoe"),
             "model_type \"llama\" is not supported")

    # An fp8 block scale whose weights are finite but whose products overflow float32 (issue 63's
    # probe: 2^118, under the old bound of 2^119, gave NaN logits): refused at convert.
    def huge_scale(d):
        name = "model.layers.0.block_sparse_moe.experts.1.w2.weight_scale_inv"
        path = os.path.join(d, "model.safetensors")
        with open(path, "r+b") as f:  # the scale's first float32, patched in place
            n = struct.unpack("<Q", f.read(8))[0]
            begin = json.loads(f.read(n))[name]["data_offsets"][0]
            f.seek(8 + n + begin)
            f.write(struct.pack("<f", 2.0 ** 118))
        return name
    ok, err, rc = convert_refused(moerun, os.path.join(work, "fp8-hf"), os.path.join(work, "bad-fp8-scale"), huge_scale,
                                  "a block scale must be finite and below 2^64")
    check(ok, f"bad checkpoint, an fp8 block scale of 2^118: exit {rc}: {err}")

    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""compressed-tensors INT4 checkpoints in CI (issue 64): Kimi K2-shaped (DeepSeek-V3 architecture,
model_type kimi_k2, routed experts in INT4 symmetric groups of 32 with bf16 scales and everything
else in float, Kimi's own ignore list), Kimi K2.5's multimodal layout (language_model.model.*, a
vision tower and projector that are not converted, the quantization_config inside text_config),
and Qwen3-MoE as llm-compressor writes W4A16 for every linear (attention too), asymmetric, groups
of 128 (and of 64), fp16 scales.

The checkpoints are packed here with numpy from compressed-tensors' definition (pack_to_int32: q + 8,
eight a word, element 8j + i in bits 4i; zero points packed along the rows; dequantize: (q - zp) *
scale rounded to the scale's type). The CI venv's torch (1.13) is too old for the compressed-tensors
package (it needs torch 2.10); launch/reference-2025.sh's venv runs int4_compressed_tensors.py,
which makes the checkpoints with the package itself and compares bit for bit.

Checks:
- `--quantize none`: convert's dequantization of every INT4 tensor equals the definition bit for bit
  (the expert shards and the dense matrices), and the model gives the float64 reference's tokens and
  logits within numpy_reference's bars;
- kept as shipped (int4 experts): inspect names the format, the shards are within 1.1x of 4.5 bits
  per weight, and the tokens and logits (within 1e-4) are those of the float64 reference of the
  kernels' arithmetic: the exact products (q - zp) * scale as weights (compressed-tensors rounds
  them to the scale's type), the routed experts' matrix inputs rounded to int8 per group of 32 as
  the VNNI/AMX kernels round them (llama.cpp's Q4_0 x Q8_0 arithmetic);
- mpirun -np 4 and -np 8, a small L1 with an L2 on disk, and a hot swap of every expert give the
  one-process run's output, bit for bit;
- broken checkpoints and configs: exit 3, one line naming the file and tensor or field.

usage: int4_reference.py MOERUN_BIN WORKDIR
"""
import glob
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np
import numpy_reference
from numpy_reference import (Rng, check_model, deepseek_checkpoint, forward, deepseek_forward, qwen3_tensors, refused_checkpoints,
                             write_checkpoint, PROMPTS, STEPS)
from reference_common import Bf16, read_logits, relative_error, run, write_requests

# Kept int4 experts against the reference of the kernels' arithmetic: float32 rounding only, but
# for the rare step where an expert input's float32 and float64 values round to different int8
# levels (a step in 13 here): one level of one input moves the logits by up to ~0.5%.
INT4_REL_TOL, INT4_FLIP_TOL = 1e-4, 1e-2
HERE = os.path.dirname(os.path.abspath(__file__))
EXACT = {}


def bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even."""
    b = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7fff + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_value(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def quantize_int4(w, group, symmetric, scale_dtype):
    """compressed-tensors' min-max quantization of one matrix [out, in]: (q int8 [-8, 7], zero points
    int8 [out, in/group] or None, scale bits/values [out, in/group] in scale_dtype ("bf16" or "f16"))."""
    rows, cols = w.shape
    g = w.reshape(rows, cols // group, group).astype(np.float32)
    if symmetric:
        scale = np.abs(g).max(axis=2) / 7.5
    else:
        lo, hi = np.minimum(g.min(axis=2), 0), np.maximum(g.max(axis=2), 0)
        scale = (hi - lo) / 15.0
    scale = np.where(scale == 0, 1.0, scale).astype(np.float32)
    if scale_dtype == "bf16":
        bits = bf16_bits(scale)
        s = bf16_value(bits)
    else:
        bits = scale.astype(np.float16)
        s = bits.astype(np.float32)
    zp = None if symmetric else np.clip(-8 - np.round(lo / s), -8, 7).astype(np.int8)
    q = np.round(g / s[:, :, None]) + (0 if symmetric else zp[:, :, None])
    q = np.clip(q, -8, 7).astype(np.int8).reshape(rows, cols)
    return q, zp, bits


def dequantize_int4(q, zp, bits, group, rounded=True):
    """(q - zp) * scale, exact in float32, rounded once to the scale's type (compressed-tensors'
    dequantize); not rounded: the exact products, what the kernels multiply by."""
    rows, cols = q.shape
    s = bf16_value(bits) if bits.dtype == np.uint16 else bits.astype(np.float32)
    d = q.reshape(rows, cols // group, group).astype(np.float32) - (0 if zp is None else zp[:, :, None].astype(np.float32))
    w = (d * s[:, :, None]).reshape(rows, cols)
    if not rounded:
        return w
    return bf16_value(bf16_bits(w)) if bits.dtype == np.uint16 else w.astype(np.float16).astype(np.float32)


def pack_int32(q, axis=1):
    """pack_to_int32 for 4 bits: q + 8, eight values a word along `axis` (rows for zero points),
    padded with zero bits to whole words."""
    u = q.astype(np.int64) + 8
    if axis == 0:
        u = u.T
    u = np.concatenate([u, np.zeros((u.shape[0], (-u.shape[1]) % 8), np.int64)], axis=1)
    r, c = u.shape
    u = u.reshape(r, c // 8, 8)
    words = np.zeros((r, c // 8), np.uint64)
    for i in range(8):
        words |= u[:, :, i].astype(np.uint64) << np.uint64(4 * i)
    out = words.astype(np.uint32).view(np.int32)
    return np.ascontiguousarray(out.T if axis == 0 else out)


def compress(tensors, covered, group, symmetric, scale_dtype):
    """The checkpoint with every covered linear packed (X.weight_packed, _scale, _shape, and
    _zero_point when asymmetric) and the reference's weights: what those bytes stand for (and, in
    EXACT[id(ref)], the kernels' exact products in the routed experts' place: the dense layers hold
    what convert dequantizes)."""
    t, ref = {}, dict(tensors)
    exact = EXACT[id(ref)] = dict(tensors)
    for n, w in tensors.items():
        if not (n.endswith(".weight") and w.ndim == 2 and covered(n[:-len(".weight")])):
            t[n] = w
            continue
        q, zp, bits = quantize_int4(w, group, symmetric, scale_dtype)
        t[n + "_packed"] = pack_int32(q)
        t[n + "_scale"] = bits.view(Bf16) if scale_dtype == "bf16" else bits
        t[n + "_shape"] = np.array(w.shape, np.int64)
        if zp is not None:
            t[n + "_zero_point"] = pack_int32(zp, axis=0)
        ref[n] = dequantize_int4(q, zp, bits, group)
        exact[n] = dequantize_int4(q, zp, bits, group, rounded=".mlp.experts." not in n)
    return t, ref


def int4_config(group, symmetric, ignore):
    return {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None, "output_activations": None,
                                          "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": group,
                                                      "symmetric": symmetric, "dynamic": False, "actorder": None, "observer": "minmax"}}},
            "ignore": ignore, "kv_cache_scheme": None, "sparsity_config": {}}


KIMI_IGNORE = ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]


def kimi_k2_checkpoint(seed):
    """DeepSeek-V3 at numpy_reference's small shape as Kimi K2-Thinking ships it: model_type kimi_k2,
    routed experts INT4 (symmetric, groups of 32, bf16 scales), the rest in float."""
    cfg, t, _ = deepseek_checkpoint(Rng(seed), v3=True, fp8=False)
    cfg = dict(cfg, model_type="kimi_k2", architectures=["DeepseekV3ForCausalLM"], num_nextn_predict_layers=0,
               quantization_config=int4_config(32, True, KIMI_IGNORE))
    t = {n: w for n, w in t.items() if not n.startswith(f"model.layers.{cfg['num_hidden_layers']}.")}  # no MTP layer
    packed, ref = compress(t, lambda m: ".mlp.experts." in m, 32, True, "bf16")  # what KIMI_IGNORE leaves of the linears
    return cfg, packed, ref


def kimi_k25_checkpoint(seed):
    """Kimi K2.5's layout: the text model under language_model.model.* and language_model.lm_head,
    a vision tower and projector beside it, the text model's config (quantization_config included)
    in text_config."""
    cfg, packed, ref = kimi_k2_checkpoint(seed)
    t = {}
    for n, w in packed.items():
        t[("language_model." + n) if n.startswith(("model.", "lm_head.")) else n] = w
    t["vision_tower.patch_embed.proj.weight"] = np.ones((8, 3), np.float32)
    t["mm_projector.proj.0.weight"] = np.ones((4, 8), np.float32)
    text = dict(cfg, model_type="kimi_k2")
    outer = {"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"], "text_config": text,
             "vision_config": {"hidden_size": 8}, "tie_word_embeddings": False}
    return outer, t, cfg, ref


def qwen3_int4_checkpoint(seed, group, symmetric, scale_dtype):
    """Qwen3-MoE as llm-compressor writes W4A16 for every linear but the router and the LM head."""
    cfg = dict(model_type="qwen3_moe", vocab_size=128, hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, head_dim=32, intermediate_size=256, moe_intermediate_size=128, num_experts=6,
               num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1,
               eos_token_id=127, tie_word_embeddings=False, attention_bias=False, rope_theta=1e6, mlp_only_layers=[1],
               hidden_act="silu", quantization_config=int4_config(group, symmetric, ["lm_head", "re:.*mlp\\.gate$"]))
    t = qwen3_tensors(Rng(seed), cfg)
    packed, ref = compress(t, lambda m: m != "lm_head" and not m.endswith("mlp.gate") and "embed" not in m, group, symmetric, scale_dtype)
    return cfg, packed, ref


def bit_exact(work, name, ref, cfg):
    """The --quantize none conversion's experts and dense matrices against the definition's
    dequantization: equal floats, bit for bit."""
    moe = os.path.join(work, name + "-moe")
    diffs, n = [], 0
    layers = cfg["num_hidden_layers"]
    moe_layers = [l for l in range(layers) if any(k.startswith(f"model.layers.{l}.mlp.experts.") for k in ref)]
    for shard in sorted(glob.glob(os.path.join(moe, "experts-*.h5"))):
        with h5py.File(shard) as f:
            for ls, layer in f["layers"].items():
                for es, g in layer["experts"].items():
                    l = moe_layers[int(ls)]
                    for ours, hf in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                        want = ref[f"model.layers.{l}.mlp.experts.{es}.{hf}.weight"]
                        n += 1
                        if not np.array_equal(g[ours][()].astype(np.float32).view(np.uint32), want.view(np.uint32)):
                            diffs.append(f"{shard}:{ls}/{es}/{ours}")
    ok = n > 0 and not diffs
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {n} dequantized expert matrices equal (q - zp) * scale in the scale's type, bit for bit {diffs[:3]}")
    return not ok


def size_check(work, name, cfg):
    """Kept as shipped: the expert shards' bytes per expert weight (inspect's bytes per expert)."""
    info = run([sys.argv[1], "inspect", "--model", os.path.join(work, name + "-moe")]).stdout
    per = next(int(l.split()[3]) for l in info.splitlines() if l.startswith("bytes per expert"))
    d, ff = cfg["hidden_size"], cfg["moe_intermediate_size"]
    bits = per * 8 / (3 * d * ff)
    ok = bits <= 1.1 * 4.5
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {bits:.3f} bits per expert weight as stored (<= 1.1 x 4.5)")
    return not ok


def int8_groups(x):
    """x [T, K] as the int4/q4 kernels take a matrix input: per row and group of 32, in float32,
    dx = amax / 127 and q = round-to-even(x * (127 / amax)); the value dx * q."""
    x32 = np.asarray(x, np.float32)
    g = x32.reshape(x32.shape[0], -1, 32)
    amax = np.abs(g).max(axis=2, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    q = np.rint((g * inv).astype(np.float32))
    return (q.astype(np.float64) * (amax / np.float32(127)).astype(np.float32)).reshape(x32.shape)


def kept_against_reference(moerun, work, name, cfg, ref, fwd):
    """Kept int4 experts against the float64 forward of what the kernels compute: the experts'
    weights the exact products (q - zp) * scale (compressed-tensors rounds them to the scale's type,
    which moves these models' logits by 0.2-0.9%, printed "for scale": the --quantize none runs check that form), and each
    routed expert's matrix inputs rounded to int8 per group of 32 as the kernels round them. The
    greedy tokens, and every step's logits within INT4_REL_TOL but at most one in five (and never
    more than 2) within INT4_FLIP_TOL."""
    rounded, ref = ref, EXACT[id(ref)]
    moe = os.path.join(work, name + "-moe")
    reqs, out, lg = (os.path.join(work, name + s) for s in ("-kreqs.jsonl", "-kout.jsonl", "-klogits.jsonl"))
    write_requests(reqs, PROMPTS, STEPS)
    r = run([moerun, "infer", "--model", moe, "--input", reqs, "--output", out, "--logits-out", lg, "--quiet"])
    if r.returncode:
        print(f"FAIL {name}: infer exit {r.returncode}: {r.stderr.strip()}")
        return 1
    ours = {json.loads(l)["id"]: json.loads(l)["output_tokens"] for l in open(out)}
    logits = read_logits(lg)
    failures, errors, apart = 0, [], []
    numpy_reference.expert_input = int8_groups
    try:
        for i, prompt in enumerate(PROMPTS):
            ids, steps = list(prompt), []
            for _ in range(STEPS):
                steps.append(fwd(cfg, ref, ids)[-1])
                ids.append(int(np.argmax(steps[-1])))
            want, got = ids[len(prompt):], ours[f"p{i}"]
            errors += [relative_error(a, b) for a, b in zip(logits[f"p{i}"], steps)]
            apart.append(relative_error(logits[f"p{i}"][0], fwd(cfg, rounded, prompt)[-1]))  # for scale: the rounded weights
            ok = got == want[:len(got)] and len(got) > 0
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name} (int4 kept): prompt {i}: tokens {got}, reference {want}")
    finally:
        numpy_reference.expert_input = lambda x: x
    flips = sum(e > INT4_REL_TOL for e in errors)
    ok = max(errors) <= INT4_FLIP_TOL and flips <= min(2, len(errors) // 5)
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name} (int4 kept): logits within {INT4_REL_TOL} of the reference in {len(errors) - flips} of "
          f"{len(errors)} steps, the rest within {INT4_FLIP_TOL} (worst {max(errors):.2e}; median {np.median(errors):.1e})")
    print(f"     {name}: for scale, each prompt's first step against compressed-tensors' rounded weights (same int8 inputs): "
          f"{', '.join(f'{e:.1e}' for e in apart)}")
    return failures


def ranks_cache_swap(moerun, work, name, other):
    """np 4 and 8, a 3-expert L1 with an L2 on disk, and a hot swap to `other`'s experts at np 4:
    the one-process outputs, bit for bit."""
    moe, reqs = os.path.join(work, name + "-moe"), os.path.join(work, name + "-kreqs.jsonl")
    base = os.path.join(work, name + "-kout.jsonl")
    mpi = os.environ.get("MPIEXEC", "mpirun").split() + ["--oversubscribe", "--bind-to", "none"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    failures = 0
    slot = next(int(l.split()[3]) for l in run([moerun, "inspect", "--model", moe]).stdout.splitlines() if l.startswith("bytes per expert"))
    runs = {"np 4": mpi + ["-np", "4", moerun, "infer"], "np 8": mpi + ["-np", "8", moerun, "infer"],
            "L1 of 3 experts, L2 on disk": [moerun, "infer", "--l1-bytes", str(3 * slot), "--l2-dir", os.path.join(work, name + "-l2")]}
    for what, cmd in runs.items():
        out = os.path.join(work, f"{name}-{what.split()[0]}{what.split()[1]}.jsonl")
        r = subprocess.run(cmd + ["--model", moe, "--input", reqs, "--output", out, "--quiet"], capture_output=True, text=True, env=env)
        ok = r.returncode == 0 and open(out).read() == open(base).read()
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {what} gives the one-process output {r.stderr.strip()[-200:]}")
    # Hot swap: this model's dense part with `other`'s experts is the reference.
    ab = os.path.join(work, name + "-ab")
    os.makedirs(ab)
    shutil.copy(os.path.join(moe, "model.h5"), ab)
    shards = sorted(glob.glob(os.path.join(work, other + "-moe", "experts-*.h5")))
    for s in shards:
        shutil.copy(s, ab)
    run([sys.executable, os.path.join(HERE, "..", "integration", "rebind_shards.py"), ab])
    ab_out, swapped = os.path.join(work, name + "-ab.jsonl"), os.path.join(work, name + "-swapped.jsonl")
    r1 = run([moerun, "infer", "--model", ab, "--input", reqs, "--output", ab_out, "--quiet"])
    control = os.path.join(work, name + "-swap.json")
    json.dump({"swaps": [{"shard": s, "experts": "all"} for s in shards]}, open(control, "w"))
    stats = os.path.join(work, name + "-swap-stats.json")
    r2 = subprocess.run(mpi + ["-np", "4", moerun, "infer", "--model", moe, "--input", reqs, "--output", swapped, "--quiet", "--swap-control",
                               control, "--stats-json", stats], capture_output=True, text=True, env=env)
    ok = (r1.returncode == 0 and r2.returncode == 0 and open(ab_out).read() == open(swapped).read() and open(ab_out).read() != open(base).read()
          and json.load(open(stats))["hot_swap"]["applied"] == 1)
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: a hot swap to another checkpoint's int4 experts at np 4 gives that model's output "
          f"{(r1.stderr + r2.stderr).strip()[-200:]}")
    return failures


def inspect_plans(moerun, work):
    """inspect --hf-config plans each checkpoint's experts as convert stores them, and refuses what
    convert refuses."""
    failures = 0
    for name, want in (("kimi_k2", "experts int4"), ("kimi_k25", "experts int4"), ("qwen3_moe_w4a16_asym_g128_f16", "experts int4")):
        first = run([moerun, "inspect", "--hf-config", os.path.join(work, name + "-hf", "config.json")]).stdout.splitlines()
        ok = bool(first) and want in first[0]
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} inspect --hf-config {name}: {first[0] if first else 'no output'}")
    cfg = json.load(open(os.path.join(work, "kimi_k2-hf", "config.json")))
    cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"] = {"num_bits": 8, "type": "int"}
    bad = os.path.join(work, "inspect-w4a8.json")
    json.dump(cfg, open(bad, "w"))
    r = run([moerun, "inspect", "--hf-config", bad])
    ok = r.returncode == 3 and "input_activations is set" in r.stderr
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} inspect --hf-config refuses W4A8 as convert does: exit {r.returncode}: {r.stderr.strip()}")
    # A regex nested 30,000 deep overflowed std::regex's recursive compiler (SIGSEGV) (issue 77).
    cfg["quantization_config"]["config_groups"]["group_0"]["input_activations"] = None
    cfg["quantization_config"]["ignore"] = ["re:" + "(" * 30000 + "a" + ")" * 30000]
    json.dump(cfg, open(bad, "w"))
    r = run([moerun, "inspect", "--hf-config", bad])
    ok = r.returncode == 3 and "nests 30000 groups deep" in r.stderr and len(r.stderr.splitlines()) == 1
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} inspect --hf-config, a pattern nested 30,000 deep: exit {r.returncode}: {r.stderr.strip()[:200]}")
    return failures


def bad_checkpoints(moerun, work):
    cfg, t, _ = kimi_k2_checkpoint(21)
    e = "model.layers.2.mlp.experts.5.up_proj.weight"
    nan_scale = t[e + "_scale"].copy()
    nan_scale[3, 1] = 0x7fc0
    q = lambda **kw: dict(cfg, quantization_config=dict(cfg["quantization_config"], **kw))
    group = lambda **kw: dict(cfg, quantization_config=dict(cfg["quantization_config"], config_groups={"group_0": dict(
        cfg["quantization_config"]["config_groups"]["group_0"], **kw)}))
    weights = cfg["quantization_config"]["config_groups"]["group_0"]["weights"]
    return refused_checkpoints(moerun, work, "bad-int4", [
        ("a packed weight without its scales", cfg, {k: v for k, v in t.items() if k != e + "_scale"},
         "the checkpoint has no " + e + "_scale (its group scales)"),
        ("a NaN scale", cfg, dict(t, **{e + "_scale": nan_scale.view(Bf16)}), e + "_scale contains NaN at [3,1]"),
        ("scales of groups of 16", cfg, dict(t, **{e + "_scale": np.ones((32, 4), np.uint16).view(Bf16)}),
         e + "_scale has shape [32,4]: groups of 32, 64 or 128 of 64 columns expected"),
        ("a weight_shape that is not the config's", cfg, dict(t, **{e + "_shape": np.array([32, 32], np.int64)}),
         e + "_shape is [32, 32], expected [32, 64]"),
        ("activation-ordered groups (g_idx)", cfg, dict(t, **{e + "_g_idx": np.zeros(64, np.int32)}), e + "_g_idx is there"),
        ("W4A8 (quantized activations)", group(input_activations={"num_bits": 8, "type": "int"}), t, "input_activations is set"),
        ("8-bit weights", group(weights=dict(weights, num_bits=8)), t, "weights.num_bits is 8; only 4 is read"),
        ("float-quantized format", q(format="float-quantized"), t, "quantization_config.format is \"float-quantized\""),
        ("a frozen (not packed) checkpoint", q(quantization_status="frozen"), t, "quantization_status is \"frozen\""),
        # Issue 77: every value of the quantization_config checked against what convert does with it.
        ("quantization_config the string \"int4\"", dict(cfg, quantization_config="int4"), t, "field quantization_config is \"int4\", not an object"),
        ("quantization_config 7", dict(cfg, quantization_config=7), t, "field quantization_config is 7, not an object"),
        ("quantization_config a list", dict(cfg, quantization_config=[cfg["quantization_config"]]), t, "not an object"),
        ("no quantization_config beside weight_packed tensors", {k: v for k, v in cfg.items() if k != "quantization_config"}, t,
         "is compressed-tensors INT4, but"),
        ("targets that match nothing", group(targets=["re:nothing\\..*"]), t, "its targets and ignore do not cover model.layers."),
        ("symmetric false without zero points", group(weights=dict(weights, symmetric=False)), t, "weights.symmetric is false, but model.layers."),
        ("a group_size the scales disagree with", group(weights=dict(weights, group_size=64)), t, "weights.group_size is 64, but model.layers."),
        ("a pattern nested 30,000 deep", q(ignore=["re:" + "(" * 30000 + "a" + ")" * 30000]), t, "nests 30000 groups deep; at most 32"),
        ("a pattern 100,000 characters long", q(ignore=["re:" + "a" * 100000]), t, "is 100000 characters long; at most 1024"),
    ])


def main():
    moerun, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = 0
    cases = []
    cfg, t, ref = kimi_k2_checkpoint(17)
    cases.append(("kimi_k2", cfg, t, ref, deepseek_forward, dict(cfg, model_type="deepseek_v3")))  # the reference: DeepSeek-V3's forward
    outer, t25, cfg25, ref25 = kimi_k25_checkpoint(19)
    cases.append(("kimi_k25", outer, t25, ref25, deepseek_forward, dict(cfg25, model_type="deepseek_v3")))
    cfg, t, ref = qwen3_int4_checkpoint(23, 128, False, "f16")
    cases.append(("qwen3_moe_w4a16_asym_g128_f16", cfg, t, ref, forward, None))
    cfg, t, ref = qwen3_int4_checkpoint(29, 64, True, "f16")
    cases.append(("qwen3_moe_w4a16_sym_g64_f16", cfg, t, ref, forward, None))
    for name, cfg, t, ref, fwd, ref_cfg in cases:
        # Dequantized at convert: the full float64 bars, and every expert bit for bit.
        failures += check_model(moerun, work, name + "_dequantized", cfg, t, ref, ["--quantize", "none"], None, ref_cfg)
        failures += bit_exact(work, name + "_dequantized", ref, ref_cfg or cfg)
        os.symlink(os.path.join(work, name + "_dequantized-hf"), os.path.join(work, name + "-hf"))
        r = run([moerun, "convert", "--from-hf", os.path.join(work, name + "-hf"), "--out", os.path.join(work, name + "-moe"), "--shards", "2", "--quiet"])
        info = run([moerun, "inspect", "--model", os.path.join(work, name + "-moe")]).stdout.splitlines()
        ok = r.returncode == 0 and info and "experts int4" in info[0]
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: kept as shipped: {info[0] if info else r.stderr.strip()}")
        if not ok:
            continue
        failures += size_check(work, name, ref_cfg or cfg)
        failures += kept_against_reference(moerun, work, name, ref_cfg or cfg, ref, fwd)
    # The second Kimi checkpoint's experts (same shapes, another seed) for the hot swap.
    cfg, t, ref = kimi_k2_checkpoint(31)
    write_checkpoint(os.path.join(work, "kimi_k2_b-hf"), cfg, t)
    run([moerun, "convert", "--from-hf", os.path.join(work, "kimi_k2_b-hf"), "--out", os.path.join(work, "kimi_k2_b-moe"), "--shards", "2", "--quiet"])
    failures += ranks_cache_swap(moerun, work, "kimi_k2", "kimi_k2_b")
    failures += inspect_plans(moerun, work)
    failures += bad_checkpoints(moerun, work)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

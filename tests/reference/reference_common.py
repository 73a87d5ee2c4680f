"""What the reference scripts share: running moerun, reading its --logits-out file, greedy
decoding of a Hugging Face model by full recomputation (no KV cache: the reference for every step),
and the relative error the scripts bound; a converted model run against a reference, and its
parameter count as `inspect` prints it."""
import json
import os
import struct
import subprocess

import numpy as np


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def read_logits(path):
    """{request id: [logits of each emitted token, float64]} from an --logits-out file."""
    out = {}
    for line in open(path):
        rec = json.loads(line)
        out.setdefault(rec["id"], []).append(np.array(rec["logits"], dtype=np.float64))
    return out


def relative_error(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# The bar for a float32 engine against a float64 forward. Some steps of the tiny random models are
# ill-conditioned (a DeltaNet output near zero that a norm scales back up): moving every weight by
# half a float32 ulp moves them by up to 1e-4, so no float32 forward, transformers' own included,
# holds 1e-5 there (docs/NOTES.md). A step's bar is FLOAT32_TOL or FLOOR_FACTOR times the most that
# FLOOR_SEEDS such perturbations move it, whichever is larger. A float32 forward also rounds every
# activation: transformers' own lands at up to 1.4 times that most, moerun's release build 1.6, its
# sanitizer build (other code paths) 2.0, hence 3.
FLOAT32_TOL = 1e-5
FLOOR_FACTOR = 3.0
FLOOR_SEEDS = 16


def half_ulp_factors(shape, rng):
    """Multipliers 1 + 2^-24 N(0, 1): each weight moved by about half a float32 ulp."""
    return 1.0 + 2.0 ** -24 * rng.standard_normal(shape)


def step_bars(reference, perturbed):
    """Each step's bar from the reference's step logits and, per perturbation, the same steps'
    logits with the weights moved by half_ulp_factors."""
    floors = [max(relative_error(p[i], ref) for p in perturbed) for i, ref in enumerate(reference)]
    return [max(FLOAT32_TOL, FLOOR_FACTOR * f) for f in floors]


def conditioned_worst(errors, bars):
    """(worst error / bar, that error, that bar) over steps; a ratio above 1 fails."""
    return max(((e / b, e, b) for e, b in zip(errors, bars)), default=(0.0, 0.0, FLOAT32_TOL))


def hf_greedy(model, prompt, steps):
    """Greedy tokens and each step's last-position logits (float64) of a transformers model."""
    import torch
    ids = list(prompt)
    logits = []
    with torch.no_grad():
        for _ in range(steps):
            lg = model(torch.tensor([ids])).logits[0, -1].double().numpy()
            logits.append(lg)
            ids.append(int(np.argmax(lg)))
    return ids[len(prompt):], logits


def write_requests(path, prompts, steps):
    """One greedy request per prompt, ids p0, p1, ..."""
    with open(path, "w") as f:
        for i, p in enumerate(prompts):
            f.write(json.dumps({"id": f"p{i}", "prompt_tokens": p, "max_new_tokens": steps}) + "\n")


def convert_refused(moerun, src, d, edit, pattern):
    """Copies checkpoint `src` to `d`, applies `edit(d)` (which returns what the error must name, or
    None) and converts it: True when that is exit 3 with one line holding `pattern` and the name,
    and no model.h5 written. Returns (ok, stderr, exit code)."""
    import os
    import shutil
    shutil.copytree(src, d)
    named = edit(d)
    out = d + "-out"
    r = run([moerun, "convert", "--from-hf", d, "--out", out, "--quiet"])
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    ok = (r.returncode == 3 and len(lines) == 1 and pattern in lines[0] and (named is None or named in lines[0])
          and not os.path.exists(os.path.join(out, "model.h5")))
    return ok, r.stderr.strip(), r.returncode


def inspect_total(moerun, model_dir):
    """The parameter count `moerun inspect` prints for a model (-1 when it prints none)."""
    r = run([moerun, "inspect", "--model", model_dir])
    return next((int(l.split()[1]) for l in r.stdout.splitlines() if l.strip().startswith("total ")), -1)


def infer_against(check, moerun, work, tag, model_dir, prompts, steps, reference, rel_tol):
    """Runs `moerun infer --logits-out` on the prompts and checks each one's greedy tokens and every
    step's logits against reference[i] = (tokens, logits) (hf_greedy's). The run ends at EOS and the
    reference continues: what moerun produced is compared. Returns (requests, output, logits) paths,
    or None when infer failed."""
    reqs = os.path.join(work, tag + "-reqs.jsonl")
    write_requests(reqs, prompts, steps)
    out, logits = os.path.join(work, tag + "-out.jsonl"), os.path.join(work, tag + "-logits.jsonl")
    r = run([moerun, "infer", "--model", model_dir, "--input", reqs, "--output", out, "--logits-out", logits, "--quiet"])
    check(r.returncode == 0, f"{tag}: infer (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    if r.returncode:
        return None
    ours = {json.loads(l)["id"]: json.loads(l) for l in open(out)}
    ours_logits = read_logits(logits)
    worst = 0.0
    for i, p in enumerate(prompts):
        toks, ref = reference[i]
        got = ours[f"p{i}"]["output_tokens"]
        check(got == toks[:len(got)] and len(got) > 0, f"{tag}: prompt {i} ({len(p)} tokens): greedy tokens {got} vs Hugging Face {toks}")
        for a, b in zip(ours_logits[f"p{i}"], ref):
            worst = max(worst, relative_error(a, b))
    check(worst <= rel_tol, f"{tag}: logits within {rel_tol} of Hugging Face (worst relative error {worst:.2e})")
    return reqs, out, logits


# ---- fp8 checkpoints, as Qwen3-FP8 and DeepSeek-V3 ship them (no float8 in this numpy or torch) ----

class Fp8(np.ndarray):
    """e4m3fn bytes (uint8) that the file calls F8_E4M3."""


class Bf16(np.ndarray):
    """bfloat16 bits (uint16) that the file calls BF16."""


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, a in tensors.items():
        marked = "F8_E4M3" if isinstance(a, Fp8) else "BF16" if isinstance(a, Bf16) else None
        a = np.ascontiguousarray(a)
        dtype = marked or {np.dtype(np.float32): "F32", np.dtype(np.uint8): "U8", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32",
                           np.dtype(np.int64): "I64"}[a.dtype]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def e4m3_values():
    """The 256 codes of float8 e4m3fn as float64 (0x7f, 0xff: NaN), from the definition."""
    b = np.arange(256)
    e, m = (b >> 3) & 15, b & 7
    v = np.where(e == 0, m * 2.0 ** -9, (1 + m / 8) * 2.0 ** (e - 7))
    v = np.where(b & 0x80, -v, v)
    v[[0x7f, 0xff]] = np.nan
    return v


E4M3 = e4m3_values()


def quantize_fp8(w):
    """[rows, cols] float32 -> (e4m3 codes, float32 scales per 128 x 128 block), DeepSeek's weight
    quantization: scale = amax / 448 per block, each value the nearest code of w / scale."""
    rows, cols = w.shape
    sr, sc = -(-rows // 128), -(-cols // 128)
    scales = np.zeros((sr, sc), np.float32)
    q = np.zeros(w.shape, np.uint8)
    pos = E4M3[:127]
    for i in range(sr):
        for j in range(sc):
            blk = w[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128].astype(np.float64)
            s = np.float32(np.abs(blk).max() / 448)
            scales[i, j] = s
            a = np.minimum(np.abs(blk) / s, 448)
            k = np.clip(np.searchsorted(pos, a), 1, 126)
            k = np.where(a - pos[k - 1] < pos[k] - a, k - 1, k)
            q[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = k | np.where(blk < 0, 0x80, 0)
    return q.view(Fp8), scales


def dequant_fp8(q, scales):
    """e4m3 * its block's scale, one float32 product (DeepSeek's weight_dequant), as float64."""
    s = np.repeat(np.repeat(scales, 128, axis=0), 128, axis=1)[:q.shape[0], :q.shape[1]]
    return (E4M3[np.asarray(q, np.uint8)].astype(np.float32) * s).astype(np.float64)



#!/usr/bin/env python3
"""The runs of launch/bench-peer.sh: moerun and llama.cpp side by side (issues 11, 25).

For each dtype: a synthetic Mixtral-shaped model (moerun synth) and its GGUF (moe_to_gguf.py); for
q8 and q4, moerun's quantized experts and llama-quantize's Q8_0, Q4_K_M and Q4_0 of the float32
model's GGUF; a greedy-token check (moerun infer against llama_greedy on the same prompts); then for
each run and each batch size N, one `moerun infer` and one `llama-batched-bench` per peer,
interleaved so that drift of the machine hits all alike. Prints an nccl-tests-style table of
prefill, decode and total tokens/s (min / median / max) and the ratio of the medians, and moerun's
decode weight streaming at N=1 as a fraction of the machine's copy bandwidth (measured by moerun
bench infer). With quantized dtypes, also their quality against the bf16 model: KL divergence and
top-1 agreement over the same tokens, moerun perplexity --kl-base beside llama-perplexity
--kl-divergence. With --ik-bin, ik_llama.cpp's llama-batched-bench on the first peer's GGUF too
(the same file, so the same KL up to its kernels' rounding), with its options for MoE: the default
(fused MoE), -rtr (run-time repacking into its row-interleaved layouts) and -no-fmoe, and moerun's
ratio to the best of them; at N > 1 without FlashAttention, which asserts with several sequences.
"""
import argparse
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys

from bench_offload import batched_bench_cells, peer_decode_times

HERE = os.path.dirname(os.path.abspath(__file__))
# The synthetic models, by shape. Mixtral's: 8 experts of width 3584, top-2 (Mixtral-8x7B at a
# quarter of its width). Qwen3-MoE's: 128 experts of width 384, top-8, per-head q/k norms, GQA 16/2
# of head_dim 128 (Qwen3-30B-A3B at half its width).
SHAPES = {
    "mixtral": ["--layers", "4", "--experts", "8", "--top-k", "2", "--hidden", "1024", "--intermediate", "3584", "--heads", "8",
                "--kv-heads", "4", "--head-dim", "128", "--vocab", "32000", "--max-position", "4096"],
    "qwen3_moe": ["--family", "qwen3_moe", "--layers", "4", "--experts", "128", "--top-k", "8", "--hidden", "1024",
                  "--intermediate", "384", "--heads", "16", "--kv-heads", "2", "--head-dim", "128", "--vocab", "32000",
                  "--max-position", "4096"],
    # Qwen3.5-35B-A3B at half its width, 4 layers keeping its 3:1 pattern (3 Gated DeltaNet, 1 gated full
    # attention): 128 experts of 384 and a gated shared expert of 384, top-8; DeltaNet 8 key heads and 16
    # value heads of 128; attention 16/2 heads of 128 with a quarter of each rotated.
    "qwen3_5_moe": ["--family", "qwen3_5_moe", "--layers", "4", "--experts", "128", "--top-k", "8", "--hidden", "1024",
                    "--intermediate", "384", "--heads", "16", "--kv-heads", "2", "--head-dim", "128", "--vocab", "32000",
                    "--max-position", "4096"],
}
SYNTH = ["--shards", "2", "--seed", "1"]
# moerun's quantized experts against the llama.cpp types a user would pick at those bits, each made by
# llama-quantize from the GGUF of the same float32 model (the same seed: the same weights).
QUANT_PEERS = {"q8": ["Q8_0"], "q4": ["Q4_K_M", "Q4_0"], "int4": ["Q4_K_M", "Q4_0"]}
QUALITY_CONTEXT = 512
# The prefill target against llama.cpp per shape (issue 11: 2x on Mixtral's; issue 23: 1.5x on Qwen3-MoE's;
# issue 43: 1.0x on Qwen3.5-MoE's).
PREFILL_TARGET = {"mixtral": 2.0, "qwen3_moe": 1.5, "qwen3_5_moe": 1.0}
# Qwen3.5's DeltaNet projections and shared expert: dense layers too, kept bf16 in the "experts only" variant.
HYBRID_DENSE = ("attn_qkv", "attn_gate", "ssm_alpha", "ssm_beta", "ssm_out", "ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp")
# ik_llama.cpp's runs: its default (fused MoE on), run-time repacking, fused MoE off.
IK_VARIANTS = [("", []), (" -rtr", ["-rtr"]), (" -no-fmoe", ["-no-fmoe"])]


def peer_failure(r):
    """What a failed peer run said: its exit or signal, and its assertion or error line if it printed one."""
    how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
    lines = [l.strip() for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    said = [l for l in lines if re.search(r"GGML_ASSERT|error|Assertion|failed", l)] or lines[-1:]
    return how + (f": {said[0][:200]}" if said else "")


def peer_decode_rates(tool, gguf, args, requests, o, env):
    """prefill, decode and total tokens/s of peer_decode on the prompts of moerun's request file
    (o.new steps of every sequence), or the failed run."""
    prompts = "".join(" ".join(map(str, json.loads(l)["prompt_tokens"])) + "\n" for l in open(requests))
    r = subprocess.run([tool, gguf, str(o.threads), str(o.new)] + args, input=prompts, capture_output=True, text=True, env=env,
                       cwd=o.work)
    t = peer_decode_times(r.stdout) if r.returncode == 0 else None
    if t is None:
        return r
    pt, ps, dtk, ds = t
    return {"prefill": pt / ps, "decode": dtk / ds, "total": (pt + dtk) / (ps + ds)}


def sh(cmd, env=None, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    if r.returncode:
        sys.exit(f"bench_peer: {' '.join(cmd[:3])} ... failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return r


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--moerun", required=True)
    a.add_argument("--peer-bin", required=True)
    a.add_argument("--ik-bin", default="", help="ik_llama.cpp's llama-batched-bench directory: also that peer")
    a.add_argument("--work", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--dtypes", default="float32,bfloat16")
    a.add_argument("--batches", default="1,8,32")
    a.add_argument("--runs", type=int, default=3)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--prompt", type=int, default=128)
    a.add_argument("--new", type=int, default=128)
    a.add_argument("--shape", default="mixtral", choices=sorted(SHAPES))
    # moerun's LM head and attention projections: as stored (bf16), or quantized at load as
    # llama.cpp's types quantize theirs (Q8_0: all Q8_0; Q4_K_M: Q4_K with Q6_K head and some V).
    a.add_argument("--moerun-dense", default="none", choices=["none", "q8", "q4"])
    # The timed runs are 128 tokens long to keep the bench short; a job of 2048 decode steps or more
    # gets huge pages by default (--huge-pages auto), and that steady state is what is compared.
    a.add_argument("--moerun-huge-pages", default="on", choices=["on", "off", "auto"])
    # peer_decode: the peers decode moerun's requests (each sequence its prompt and its own greedy
    # tokens); batched-bench: llama-batched-bench, whose prompts and generated tokens are all token
    # 0, so every sequence and step routes alike and a step reads a few experts (the figures before
    # session 10 were taken so).
    a.add_argument("--peer-tool", default="peer_decode", choices=["peer_decode", "batched-bench"])
    o = a.parse_args()
    o.dense_args = ["--quantize-dense", o.moerun_dense]
    MODEL = SHAPES[o.shape]
    os.makedirs(o.work, exist_ok=True)
    os.makedirs(o.out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(o.threads), MOERUN_LOG="warn")
    batches = [int(x) for x in o.batches.split(",")]
    results, checks, streams, failures = [], {}, {}, {}
    def synth(dt):
        model = os.path.join(o.work, f"{o.shape}-{dt}")
        if not os.path.exists(os.path.join(model, "model.h5")):
            sh([o.moerun, "synth", "--out", model, "--dtype", dt, "--quiet"] + MODEL + SYNTH)
        return model

    def to_gguf(model):
        gguf = model + ".gguf"
        if not os.path.exists(gguf):
            sh([sys.executable, os.path.join(HERE, "moe_to_gguf.py"), model, gguf])
        return gguf

    def peers_of(dt):
        """[(label, gguf)]: the GGUF of the same model, or llama-quantize's types of the float32 one."""
        if dt not in QUANT_PEERS:
            return [("llama.cpp", to_gguf(synth(dt)))]
        f32 = to_gguf(synth("float32"))
        out = []
        for q in QUANT_PEERS[dt]:
            path = os.path.join(o.work, f"{o.shape}-{q}.gguf")
            if not os.path.exists(path):
                sh([os.path.join(o.peer_bin, "llama-quantize"), f32, path, q, str(o.threads)])
            out.append((f"llama.cpp {q}", path))
        return out

    peers, ik_peers = {}, {}
    for dt in o.dtypes.split(","):
        model = synth(dt)
        peers[dt] = peers_of(dt)
        first_label, first_gguf = peers[dt][0]
        ik_peers[dt] = [(first_label.replace("llama.cpp", "ik_llama.cpp") + suffix, first_gguf, args)
                        for suffix, args in IK_VARIANTS] if o.ik_bin else []
        gguf = peers[dt][0][1]
        # Greedy tokens: the same prompts through both.
        rng = random.Random(7)
        prompts = [[1] + [rng.randrange(3, 32000) for _ in range(15)] for _ in range(6)]
        reqs = os.path.join(o.work, "check.jsonl")
        with open(reqs, "w") as f:
            for i, p in enumerate(prompts):
                f.write(json.dumps({"id": f"c{i}", "prompt_tokens": p, "max_new_tokens": 24}) + "\n")
        sh([o.moerun, "infer", "--model", model, "--input", reqs, "--output", reqs + ".out", "--quiet"] + o.dense_args, env=env)
        ours = [json.loads(l)["output_tokens"] for l in open(reqs + ".out")]
        peer_in = "".join(f"c{i} 24 {' '.join(map(str, p))}\n" for i, p in enumerate(prompts))
        r = sh([os.path.join(o.peer_bin, "llama_greedy"), gguf, str(o.threads)], input=peer_in)
        theirs = [[int(t) for t in line.split()[1:]] for line in r.stdout.splitlines()]
        equal = sum(1 for x, y in zip(ours, theirs) if x == y)
        checks[dt] = f"{equal}/{len(prompts)}" + (f" (vs {peers[dt][0][0]}: other quantizers, not expected equal)" if dt in QUANT_PEERS else "")
        print(f"# {dt}: greedy tokens equal for {equal} of {len(prompts)} prompts (24 new tokens each)", flush=True)
        # The requests of each batch size: N prompts of the same length, as batched-bench's.
        for n in batches:
            with open(os.path.join(o.work, f"bench-{n}.jsonl"), "w") as f:
                for i in range(n):
                    p = [1] + [rng.randrange(3, 32000) for _ in range(o.prompt - 1)]
                    # new + 1: the first generated token comes out of the prefill step, as after llama.cpp's PP.
                    f.write(json.dumps({"id": f"b{i}", "prompt_tokens": p, "max_new_tokens": o.new + 1}) + "\n")
        for run in range(o.runs):
            for n in batches:
                stats = os.path.join(o.work, "stats.json")
                sh([o.moerun, "infer", "--model", model, "--input", os.path.join(o.work, f"bench-{n}.jsonl"), "--output",
                    os.path.join(o.work, "bench.out"), "--stats-json", stats, "--quiet", "--max-batch-size", str(n),
                    "--huge-pages", o.moerun_huge_pages] + o.dense_args, env=env)
                t = json.load(open(stats))["throughput"]
                results.append({"dtype": dt, "n": n, "run": run, "who": "moerun",
                                "prefill": t["prefill_tokens"] / t["prefill_seconds"],
                                "decode": t["decode_tokens"] / t["decode_seconds"],
                                "total": (t["prefill_tokens"] + t["decode_tokens"]) / (t["prefill_seconds"] + t["decode_seconds"])})
                ctx = n * (o.prompt + o.new) + 64
                if o.peer_tool == "peer_decode":
                    for label, tool, path, args in ([(label, os.path.join(o.peer_bin, "peer_decode"), path, []) for label, path in peers[dt]] +
                                                    [(label, os.path.join(o.ik_bin, "peer_decode"), path, [x.lstrip("-") for x in args])
                                                     for label, path, args in ik_peers[dt]]):
                        rates = peer_decode_rates(tool, path, args, os.path.join(o.work, f"bench-{n}.jsonl"), o, env)
                        if isinstance(rates, subprocess.CompletedProcess):  # e.g. several sequences of a recurrent model in ik_llama.cpp
                            failures.setdefault(label, f"{label} failed at N = {n}: " + peer_failure(rates))
                            rates = dict.fromkeys(("prefill", "decode", "total"), float("nan"))
                        results.append(dict(rates, dtype=dt, n=n, run=run, who=label))
                for label, path in (peers[dt] if o.peer_tool == "batched-bench" else []):
                    r = sh([os.path.join(o.peer_bin, "llama-batched-bench"), "-m", path, "-t", str(o.threads), "-tb", str(o.threads),
                            "-c", str(ctx), "-b", "2048", "-ub", "512", "-npp", str(o.prompt), "-ntg", str(o.new), "-npl", str(n),
                            "--output-format", "jsonl"], env=env)
                    line = next(l for l in (r.stdout + r.stderr).splitlines() if l.startswith("{") and '"speed_tg"' in l)
                    b = json.loads(line)
                    results.append({"dtype": dt, "n": n, "run": run, "who": label, "prefill": b["speed_pp"],
                                    "decode": b["speed_tg"], "total": b["speed"]})
                for label, path, args in (ik_peers[dt] if o.peer_tool == "batched-bench" else []):  # it prints only the markdown table
                    # Its FlashAttention asserts with several sequences (iqk_fa_templates.h: S > 0): off there.
                    fa = ["-fa", "0"] if n > 1 else []
                    r = subprocess.run([os.path.join(o.ik_bin, "llama-batched-bench"), "-m", path, "-t", str(o.threads), "-tb",
                                        str(o.threads), "-c", str(ctx), "-b", "2048", "-ub", "512", "-npp", str(o.prompt), "-ntg",
                                        str(o.new), "-npl", str(n)] + args + fa,
                                       capture_output=True, text=True, env=env, cwd=o.work)  # it writes llama.log where it runs
                    cells = batched_bench_cells(r.stdout + r.stderr) if r.returncode == 0 else None
                    if cells is None:  # e.g. several sequences of a recurrent model, which it does not run: a gap, not the end
                        failures.setdefault(label, f"{label} failed at N = {n}: " + peer_failure(r))
                        cells = [float("nan")] * 10
                    results.append({"dtype": dt, "n": n, "run": run, "who": label, "prefill": cells[5], "decode": cells[7],
                                    "total": cells[9]})
                ours = next(r for r in reversed(results) if r["who"] == "moerun")
                print(f"#   {dt} run {run + 1}/{o.runs}, N={n}: decode moerun {ours['decode']:.1f}, " +
                      ", ".join(f"{r['who']} {r['decode']:.1f}" for r in results[-len(peers[dt]) - len(ik_peers[dt]):]) + " tokens/s",
                      flush=True)
        # Weight streaming at N=1 against this machine's copy bandwidth (moerun bench infer measures both).
        js = os.path.join(o.work, "stream.json")
        sh([o.moerun, "bench", "infer", "--batch", "1", "--prompt-len", str(o.prompt), "--new-tokens", str(o.new + 1),
            "--no-baseline", "--json", js, "--dtype", dt] + MODEL + o.dense_args, env=env)
        m = json.load(open(js))
        streams[dt] = (m.get("decode_stream_fraction", 0.0), m.get("copy_gbps", 0.0), m.get("decode_stream_gbps", 0.0))
    quality = measure_quality(o, env, synth, to_gguf, peers) if any(dt in QUANT_PEERS for dt in peers) else []
    lines = [f"# moerun vs llama.cpp (llama-cpp-python's vendored build), {o.shape}-shaped model: {o.threads} threads, prompt {o.prompt}, "
             f"{o.new} new tokens per sequence, {o.runs} interleaved runs; tokens/s min/median/max"
             + ("" if o.moerun_dense == "none" else f"; moerun's LM head and attention quantized to {o.moerun_dense} (--quantize-dense)")
             + f"; moerun --huge-pages {o.moerun_huge_pages}" + (" (as in a job of 2048 decode steps or more)" if o.moerun_huge_pages == "on" else "")
             + ("; the peers decode the same prompts, each sequence its own greedy tokens (peer_decode)" if o.peer_tool == "peer_decode"
                else "; the peers in llama-batched-bench (token 0 at every position)"),
             f"#{'dtype':>9} {'N':>3} {'who':>22} {'prefill':>23} {'decode':>23} {'total':>23}"]
    ratios = []
    for dt in o.dtypes.split(","):
        for n in batches:
            med = {}
            for who in ["moerun"] + [label for label, _ in peers[dt]] + [label for label, _, _ in ik_peers[dt]]:
                rs = [r for r in results if r["dtype"] == dt and r["n"] == n and r["who"] == who]
                cols = []
                for k in ("prefill", "decode", "total"):
                    v = [r[k] for r in rs if r[k] == r[k]]  # a failed peer run is NaN
                    med[(who, k)] = statistics.median(v) if v else float("nan")
                    cols.append(f"{min(v):7.1f}/{statistics.median(v):7.1f}/{max(v):7.1f}" if v else "failed")
                lines.append(f" {dt:>9} {n:>3} {who:>22} " + " ".join(f"{c:>23}" for c in cols))
            for i, (label, _) in enumerate(peers[dt]):
                ratio = {k: med[("moerun", k)] / med[(label, k)] for k in ("prefill", "decode", "total")}
                ratios.append({"dtype": dt, "n": n, "peer": label, "bar": i == 0, **ratio})
                name = "ratio" if len(peers[dt]) == 1 else "vs " + label.split()[-1]
                lines.append(f" {dt:>9} {n:>3} {name:>22} " + " ".join(f"{ratio[k]:>23.2f}" for k in ("prefill", "decode", "total")))
            if ik_peers[dt]:  # against ik_llama.cpp's best option, per column
                ik_labels = [label for label, _, _ in ik_peers[dt]]
                ran = [label for label in ik_labels if med[(label, "decode")] == med[(label, "decode")]]
                if not ran:
                    continue
                ratio = {k: med[("moerun", k)] / max(med[(label, k)] for label in ran) for k in ("prefill", "decode", "total")}
                ratios.append({"dtype": dt, "n": n, "peer": "ik_llama.cpp best", "bar": False, "ik": True, **ratio})
                lines.append(f" {dt:>9} {n:>3} {'vs ik best':>22} " + " ".join(f"{ratio[k]:>23.2f}" for k in ("prefill", "decode", "total")))
    for dt, (frac, copy, gbps) in streams.items():
        lines.append(f"# {dt}, N=1: moerun's decode streams weights at {gbps:.1f} GB/s, {frac:.2f} of this machine's copy "
                     f"bandwidth ({copy:.1f} GB/s, read + write, measured in the same bench infer run)")
    lines.append("# greedy tokens equal: " + ", ".join(f"{k} {v}" for k, v in checks.items()))
    lines += [f"# {note}" for note in failures.values()]
    lines += [q["line"] for q in quality]
    bars = [r for r in ratios if r["bar"]]  # q8 vs Q8_0, q4 vs Q4_K_M (issue 25); plain dtypes vs the same GGUF
    worst = min(min(r["decode"], r["total"]) for r in bars)
    target = PREFILL_TARGET[o.shape] if not any(dt in QUANT_PEERS for dt in peers) else 1.5
    lines.append(f"# verdict: decode and total >= 1.0x llama.cpp at every N and dtype: {'yes' if worst >= 1.0 else 'no'} "
                 f"(lowest {worst:.2f}); prefill >= {target}x: {'yes' if min(r['prefill'] for r in bars) >= target else 'no'}")
    ik = [r for r in ratios if r.get("ik")]
    if ik:
        low = min(min(r["prefill"], r["decode"]) for r in ik)
        lines.append(f"# verdict vs ik_llama.cpp's best option: prefill and decode >= 1.0x at every N and dtype: "
                     f"{'yes' if low >= 1.0 else 'no'} (lowest {low:.2f})")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    name = ("peer" if o.shape == "mixtral" else f"peer-{o.shape}") + ("-quant" if quality else "") + \
        ("" if o.moerun_dense == "none" else f"-dense-{o.moerun_dense}")
    open(os.path.join(o.out, name + ".txt"), "w").write(text)
    json.dump({"results": results, "ratios": ratios, "greedy_equal": checks, "quality": quality, "args": vars(o)},
              open(os.path.join(o.out, name + ".json"), "w"), indent=1)


def measure_quality(o, env, synth, to_gguf, peers):
    """KL divergence and top-1 agreement against the bf16 model, both tools over the same tokens:
    llama-perplexity tokenizes a random text (byte tokens), its logits file holds the ids, moerun
    perplexity scores those ids in the same windows (the second half of each of QUALITY_CONTEXT)."""
    base = synth("bfloat16")
    base_gguf = to_gguf(base)
    text = os.path.join(o.work, "quality.txt")
    rng = random.Random(11)
    with open(text, "w") as f:  # 8 windows of 512 tokens: 2,048 scored
        f.write("".join(rng.choice("abcdefghijklmnopqrstuvwxyz ,.") for _ in range(8 * QUALITY_CONTEXT + 64)))
    kld = os.path.join(o.work, "quality-base.kld")
    ppl = os.path.join(o.peer_bin, "llama-perplexity")
    common = ["-f", text, "-c", str(QUALITY_CONTEXT), "-t", str(o.threads), "-b", str(QUALITY_CONTEXT)]
    sh([ppl, "-m", base_gguf, "--kl-divergence-base", kld] + common, env=env)
    with open(kld, "rb") as f:
        head = f.read(20)
        n_ctx, _, n_chunk = struct.unpack("<iii", head[8:20])
        ids = list(struct.unpack(f"<{n_ctx * n_chunk}i", f.read(4 * n_ctx * n_chunk)))
    ids_json = os.path.join(o.work, "quality-ids.json")
    json.dump(ids, open(ids_json, "w"))
    base_h5 = os.path.join(o.work, "quality-base.h5")
    ctx = ["--tokens", ids_json, "--context", str(n_ctx), "--quiet"]
    if os.path.exists(base_h5):
        os.remove(base_h5)
    sh([o.moerun, "perplexity", "--model", base, "--save-logits", base_h5] + ctx, env=env)
    out = []
    for dt, plist in peers.items():
        if dt not in QUANT_PEERS:
            continue
        js = os.path.join(o.work, f"quality-{dt}.json")
        sh([o.moerun, "perplexity", "--model", synth(dt), "--kl-base", base_h5, "--json", js] + ctx + o.dense_args, env=env)
        k = json.load(open(js))["kl_divergence"]
        entry = {"dtype": dt, "tokens": k["tokens"], "moerun": {"kl_mean": k["mean"], "top1": k["top1_agreement"]}}
        label = dt if o.moerun_dense == "none" else f"{dt} (dense {o.moerun_dense})"
        parts = [f"moerun {label} KL {k['mean']:.5f} top-1 {100 * k['top1_agreement']:.2f}%"]
        # Also llama.cpp with only the experts quantized (dense layers bf16, as moerun's): equal bits
        # where the two differ, and what its own types lose in the dense layers.
        f32 = to_gguf(synth("float32"))
        dense_bf16 = ["--output-tensor-type", "bf16", "--token-embedding-type", "bf16"] + \
            [a for t in ("attn_q", "attn_k", "attn_v", "attn_output") + HYBRID_DENSE for a in ("--tensor-type", f"{t}=bf16")]
        variants = list(plist)
        for q in QUANT_PEERS[dt]:
            path = os.path.join(o.work, f"{o.shape}-{q}-experts.gguf")
            if not os.path.exists(path):
                sh([os.path.join(o.peer_bin, "llama-quantize")] + dense_bf16 + [f32, path, q, str(o.threads)])
            variants.append((f"llama.cpp {q} experts only", path))
        for label, path in variants:
            r = sh([ppl, "-m", path, "--kl-divergence-base", kld, "--kl-divergence"] + common, env=env)
            log = r.stdout + r.stderr
            mean = float(re.search(r"Mean\s+KLD:\s+([0-9.eE+-]+)", log).group(1))
            top = float(re.search(r"Same top p:\s+([0-9.]+)", log).group(1)) / 100
            entry[label] = {"kl_mean": mean, "top1": top}
            parts.append(f"{label} KL {mean:.5f} top-1 {100 * top:.2f}%")
        entry["line"] = f"# quality vs bf16 over {k['tokens']} scored tokens: " + "; ".join(parts)
        out.append(entry)
        print(entry["line"], flush=True)
    return out


if __name__ == "__main__":
    main()

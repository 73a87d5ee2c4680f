#!/usr/bin/env python3
"""Models larger than memory (issue 41): moerun against llama.cpp and ik_llama.cpp on the same
weights under the same cgroup v1 memory limit (page cache counted), at several ratios of model size to limit,
with uniform and skewed routing, N sequences at once.

For each routing: a Qwen3-MoE-shaped moe-hdf5 model with q4 experts (moerun synth; skewed: --gate-skew)
and the GGUF of the same float32 weights quantized by llama-quantize to Q4_K_M (what a user of the
peers picks at 4 bits). moerun runs with --quantize-dense q4 (its LM head and attention in q4, as
Q4_K_M's) after one unlimited run that makes its dense cache and the reference tokens. The limit is
the moerun model's size over the ratio. Before each run the page cache is dropped; each run is
alone in a fresh cgroup. The peers run peer_decode.cpp (the same prompts as moerun's, each sequence
decoding its own greedy tokens: llama-batched-bench feeds token 0 at every position, so its routing
repeats and its experts stay cached, a workload no user runs). Measured per run: prefill and decode
tokens/s (moerun's --stats-json; peer_decode's timings), bytes read from disk per generated token (getrusage's
ru_inblock), peak memory of the cgroup (memory.max_usage_in_bytes: RSS and page cache), and whether
the OOM killer struck. The physical bound (`physical_bound`): this disk's rate for the reads an
expert cache makes (`expert_read_rate`: random expert-sized O_DIRECT reads, four in flight, measured
right before and right after each moerun run and averaged, `run_limited_rated`; this virtual disk
moves between 0.9 and 2.9 GB/s over minutes, so the once-per-script sequential rate of the header can
be off by 2x for a given run) over the expert bytes a decode step must read with moerun's L1, were L1
to hold the experts it should: each expert's chance of being routed in a step of N tokens comes
from the run's own routing counts, the L1's slots hold the experts likeliest on other tokens (a
held-out run of the same model on other prompts: what a policy can know before the run), and every
other expert a step routes to is read once (compute free, reads at the disk's rate). The oracle
column keeps instead the experts likeliest in the run itself: with 160 tokens a sequence, counting
noise makes near-uniform routing look skewed, so no policy that does not know the run's tokens in
advance can reach it.

usage: bench_offload.py --moerun BIN --peer-bin DIR [--ik-bin DIR] --work DIR --out DIR [options]
"""
import argparse
import json
import mmap
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CGROOT = "/sys/fs/cgroup/memory"
SHAPE = ["--family", "qwen3_moe", "--experts", "128", "--top-k", "8", "--hidden", "1024", "--intermediate", "384",
         "--heads", "16", "--kv-heads", "2", "--head-dim", "128", "--vocab", "32000", "--max-position", "4096",
         "--shards", "2", "--seed", "1"]


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {' '.join(map(str, cmd[:4]))} ... failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return r


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in ("model.h5", "experts-00000.h5", "experts-00001.h5"))


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


class Cgroup:
    """A fresh cgroup v1 memory group per run; removed afterwards."""

    def __init__(self, name, limit):
        self.path = os.path.join(CGROOT, name)
        os.makedirs(self.path, exist_ok=True)
        with open(os.path.join(self.path, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit))

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def oom_kills(self):
        m = re.search(r"^oom_kill (\d+)", self.read("memory.oom_control"), re.M)
        return int(m.group(1)) if m else 0

    def remove(self):
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.05)  # a daemon the run started may linger a moment


def run_limited(cmd, limit, name, env, timeout=None, stdin_path=None):
    """cmd inside a fresh cgroup of `limit` bytes, page cache dropped first: its output, exit code
    (negative: killed by that signal), bytes it read from the block device (getrusage's ru_inblock,
    which counts O_DIRECT reads too), the cgroup's peak usage and OOM kills; killed after `timeout` s."""
    drop_caches()
    cg = Cgroup(name, limit)
    try:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
                open(stdin_path or os.devnull) as stdin:
            p = subprocess.Popen(["bash", "-c", f'echo $$ > {cg.path}/cgroup.procs && exec "$@"', "run"] + cmd,
                                 stdin=stdin, stdout=out, stderr=err, text=True, env=env)
            timer = threading.Timer(timeout, p.kill) if timeout else None
            if timer:
                timer.start()
            _, status, usage = os.wait4(p.pid, 0)
            timed_out = bool(timer) and not timer.is_alive() and timer.finished.is_set()
            if timer:
                timer.cancel()
            p.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            return {"rc": p.returncode, "out": out.read(), "err": err.read(), "read_bytes": usage.ru_inblock * 512,
                    "peak": int(cg.read("memory.max_usage_in_bytes")), "oom": cg.oom_kills(), "timed_out": timed_out}
    finally:
        cg.remove()


def disk_read_rate(path):
    """Bytes/s of an O_DIRECT sequential read of `path` (dd), page cache dropped."""
    drop_caches()
    r = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=4M", "iflag=direct"], capture_output=True, text=True)
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", r.stderr)
    return int(m.group(1)) / float(m.group(2))


def expert_read_rate(model, expert_bytes, threads=4, seconds=1.0):
    """Bytes/s of the reads an expert cache makes: `threads` O_DIRECT reads of `expert_bytes` in flight
    at once, each at a random page of the model's expert shards, for `seconds` (O_DIRECT: the page
    cache plays no part)."""
    shards = sorted(os.path.join(model, f) for f in os.listdir(model) if f.startswith("experts-") and f.endswith(".h5"))
    fds = [os.open(f, os.O_RDONLY | os.O_DIRECT) for f in shards]
    spans = [os.fstat(fd).st_size - expert_bytes for fd in fds]
    total, stop = [0] * threads, time.monotonic() + seconds

    def reader(i):
        rng, buf = random.Random(i), mmap.mmap(-1, expert_bytes)  # page-aligned, as O_DIRECT needs
        while time.monotonic() < stop:
            j = rng.randrange(len(fds))
            total[i] += os.preadv(fds[j], [buf], rng.randrange(max(1, spans[j] // 4096)) * 4096)
    try:
        t0 = time.monotonic()
        workers = [threading.Thread(target=reader, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return sum(total) / (time.monotonic() - t0)
    finally:
        for fd in fds:
            os.close(fd)


def run_limited_rated(cmd, limit, name, env, model, expert_bytes):
    """run_limited, with "disk_rate": expert_read_rate measured right before and right after the run,
    averaged (this virtual disk moves between 0.9 and 2.9 GB/s over minutes, and by up to 0.9 GB/s
    between the two, so a rate taken once per script can be off by 2x for a given run)."""
    before = expert_read_rate(model, expert_bytes)
    r = run_limited(cmd, limit, name, env)
    r["disk_rate"] = (before + expert_read_rate(model, expert_bytes)) / 2
    return r


def expert_read_bytes(moerun, model):
    """Bytes of one expert as the model stores it (moerun inspect's "bytes per expert")."""
    out = subprocess.run([moerun, "inspect", "--model", model], capture_output=True, text=True, check=True).stdout
    return int(re.search(r"bytes per expert\s+(\d+)", out).group(1))


def physical_bound(shares, n, slots, expert_bytes, rate, held_out=None):
    """Decode tokens/s no cache policy can beat when routing is independent from step to step (the
    independent reference model, under which keeping the likeliest items is the optimal policy).
    shares: per layer, each expert's chance of being routed one token (its routed-token count over
    the run's tokens); n: tokens a decode step routes (one per sequence); slots: experts L1 holds;
    expert_bytes: the bytes of one expert's read; rate: the disk's bytes/s; held_out: shares of the
    same model on other tokens, which choose the experts L1 keeps (None: `shares` choose them, an
    oracle's choice)."""
    def chance(p):
        return 1 - (1 - min(1.0, p)) ** n
    keep_by = held_out if held_out is not None else shares
    ranked = sorted(((chance(keep_by[l][e]), chance(p)) for l, layer in enumerate(shares) for e, p in enumerate(layer)),
                    key=lambda c: c[0], reverse=True)
    misses = sum(c for _, c in ranked[max(0, slots):])  # experts a step reads, on average
    return float("inf") if misses <= 0 else n * rate / (misses * expert_bytes)


def peer_decode_times(text):
    """(prefill_tokens, prefill_s, decode_tokens, decode_s) from peer_decode's output line, or None."""
    m = re.search(r"^(\d+) ([\d.]+) (\d+) ([\d.]+)$", text, re.M)
    return (int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))) if m else None


def peer_decode_speeds(text):
    """(prefill, decode) tokens/s from peer_decode's "prefill_tokens prefill_s decode_tokens decode_s"."""
    t = peer_decode_times(text)
    return (t[0] / t[1], t[2] / t[3]) if t else None


def batched_bench_cells(text):
    """The numbers of the llama-batched-bench markdown table's one data row (PP, TG, B, N_KV, T_PP,
    S_PP, T_TG, S_TG, T, S), or None."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 10 and all(re.fullmatch(r"[\d.]+", c) for c in cells):
            return [float(c) for c in cells]
    return None


def run_bound(stats, log, n, rate, held_out=None):
    """physical_bound of one moerun run: its routing counts, and its L1 and expert sizes from the
    set-up line ("the experts (X MiB) do not fit, so Y MiB of them are cached in L1"); None when all
    experts were resident. held_out: as for physical_bound (held_out_shares)."""
    m = re.search(r"the experts \((\d+) MiB\) do not fit, so (\d+) MiB of them are cached in L1", log)
    usage, tokens, cache = stats.get("expert_usage", []), stats.get("tokens", 0), stats.get("cache", {})
    if not m or not tokens or not cache.get("l3_reads"):
        return None
    slots = int(int(m.group(2)) * sum(len(l) for l in usage) / int(m.group(1)))
    shares = usage_shares(stats)
    return physical_bound(shares, n, slots, cache["l3_bytes_read"] / cache["l3_reads"], rate, held_out)


def usage_shares(stats):
    """Per layer, each expert's routed-token count over the run's tokens (--stats-json)."""
    return [[c / stats["tokens"] for c in layer] for layer in stats["expert_usage"]]


def held_out_shares(moerun, model, work, prompt, new, env, sequences=8):
    """usage_shares of an unlimited run of `model` on prompts of its own (random seed 11; the
    benchmark's prompts use seed 7): what a cache policy can learn of the routing before a run."""
    rng = random.Random(11)
    reqs, stats = os.path.join(work, "held-out.jsonl"), os.path.join(work, "held-out-stats.json")
    with open(reqs, "w") as f:
        for i in range(sequences):
            p = [1] + [rng.randrange(3, 32000) for _ in range(prompt - 1)]
            f.write(json.dumps({"id": f"h{i}", "prompt_tokens": p, "max_new_tokens": new}) + "\n")
    sh([moerun, "infer", "--model", model, "--input", reqs, "--quantize-dense", "q4", "--max-batch-size", str(sequences),
        "--output", reqs + ".out", "--stats-json", stats, "--quiet"], env=env)
    return usage_shares(json.load(open(stats)))


def startup_times(o, engines, model, gguf, env):
    """Start-up, the issue's small job with the model in the page cache and no limit: 6 sequences of
    16 prompt and 24 new tokens, the whole process timed (load, dense set-up, the job, exit), runs
    interleaved. Returns {engine: [seconds...]}."""
    reqs, prompts = os.path.join(o.work, "startup-6.jsonl"), os.path.join(o.work, "startup-6.prompts")
    rng = random.Random(2)
    with open(reqs, "w") as f, open(prompts, "w") as fp:
        for i in range(6):
            p = [1] + [rng.randrange(3, 32000) for _ in range(15)]
            f.write(json.dumps({"id": f"s{i}", "prompt_tokens": p, "max_new_tokens": 24}) + "\n")
            fp.write(" ".join(map(str, p)) + "\n")
    cmds = {"moerun": [o.moerun, "infer", "--model", model, "--input", reqs, "--output", os.path.join(o.work, "startup.out"),
                       "--quantize-dense", "q4", "--quiet"]}
    for who, bindir in (("llama.cpp", o.peer_bin), ("ik_llama.cpp", o.ik_bin)):
        if who in engines:
            cmds[who] = [os.path.join(bindir, "peer_decode"), gguf, str(o.threads), "23"]  # + the prefill's: 24 tokens
    def run(cmd):
        with open(prompts) as stdin:
            sh(cmd, env=env, stdin=stdin)
    for cmd in cmds.values():  # into the page cache (and moerun's dense cache made)
        run(cmd)
    times = {who: [] for who in cmds}
    for _ in range(o.startup_runs):
        for who, cmd in cmds.items():
            t0 = time.monotonic()
            run(cmd)
            times[who].append(time.monotonic() - t0)
    return times


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--moerun", required=True)
    a.add_argument("--peer-bin", required=True)
    a.add_argument("--ik-bin", default="")
    a.add_argument("--work", required=True)
    a.add_argument("--out", required=True)
    a.add_argument("--ratios", default="0.8,1.5,2,4")
    a.add_argument("--routing", default="uniform,skewed")
    a.add_argument("--skew", type=float, default=1.5)
    a.add_argument("--batches", default="1,8")
    a.add_argument("--layers", type=int, default=4)
    a.add_argument("--prompt", type=int, default=128)
    a.add_argument("--new", type=int, default=32)
    a.add_argument("--threads", type=int, default=2)
    a.add_argument("--runs", type=int, default=1)
    a.add_argument("--run-timeout", type=float, default=150, help="seconds a run may take (a thrashing peer is stopped)")
    a.add_argument("--startup-runs", type=int, default=3, help="runs of the start-up job per engine (0: none)")
    o = a.parse_args()
    os.makedirs(o.work, exist_ok=True)
    os.makedirs(o.out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(o.threads), MOERUN_LOG="info")
    batches = [int(x) for x in o.batches.split(",")]
    ratios = [float(x) for x in o.ratios.split(",")]
    engines = ["moerun", "llama.cpp"] + (["ik_llama.cpp"] if o.ik_bin else [])
    shape = SHAPE + ["--layers", str(o.layers)]
    results, lines = [], []

    def synth(dtype, skew):
        path = os.path.join(o.work, f"qwen3moe-L{o.layers}-{dtype}-skew{skew}")
        if not os.path.exists(os.path.join(path, "model.h5")):
            print(f"# synth {path}", flush=True)
            sh([o.moerun, "synth", "--out", path, "--dtype", dtype, "--gate-skew", str(skew), "--quiet"] + shape)
        return path

    def gguf_q4km(skew):
        f32 = synth("float32", skew)
        out = f32 + "-Q4_K_M.gguf"
        if not os.path.exists(out):
            sh([sys.executable, os.path.join(HERE, "moe_to_gguf.py"), f32, f32 + ".gguf"])
            sh([os.path.join(o.peer_bin, "llama-quantize"), f32 + ".gguf", out, "Q4_K_M", str(o.threads)])
            os.remove(f32 + ".gguf")
        return out

    rate = None
    for routing in o.routing.split(","):
        skew = 0.0 if routing == "uniform" else o.skew
        model, gguf = synth("q4", skew), gguf_q4km(skew)
        size = dir_bytes(model)
        rate = rate or disk_read_rate(os.path.join(model, "experts-00000.h5"))
        expert_bytes = expert_read_bytes(o.moerun, model)
        held = held_out_shares(o.moerun, model, o.work, o.prompt, o.new, env)
        rng = random.Random(7)
        for n in batches:
            reqs, prompts = os.path.join(o.work, f"offload-{n}.jsonl"), os.path.join(o.work, f"offload-{n}.prompts")
            with open(reqs, "w") as f, open(prompts, "w") as fp:  # the same prompts for moerun and the peers
                for i in range(n):
                    p = [1] + [rng.randrange(3, 32000) for _ in range(o.prompt - 1)]
                    # new + 1: the first generated token comes out of the prefill step, as the peers' does.
                    f.write(json.dumps({"id": f"b{i}", "prompt_tokens": p, "max_new_tokens": o.new + 1}) + "\n")
                    fp.write(" ".join(map(str, p)) + "\n")
            moerun_args = ["infer", "--model", model, "--input", reqs, "--quantize-dense", "q4", "--max-batch-size", str(n),
                           "--max-batch-tokens", "256"]
            ref = reqs + ".ref"
            sh([o.moerun] + moerun_args + ["--output", ref, "--quiet"], env=env)  # unlimited: dense cache, reference tokens
            for ratio in ratios:
                limit = int(size / ratio)
                for run in range(o.runs):
                    for who in engines:
                        name = f"moerun-offload-{os.getpid()}"
                        if who == "moerun":
                            stats = os.path.join(o.work, "offload-stats.json")
                            out = os.path.join(o.work, "offload.out")
                            for f in (stats, out):
                                if os.path.exists(f):
                                    os.remove(f)
                            r = run_limited_rated([o.moerun] + moerun_args + ["--output", out, "--stats-json", stats], limit, name, env,
                                                  model, expert_bytes)
                            run_rate = r["disk_rate"]
                            row = {"ok": r["rc"] == 0, "disk_rate": run_rate}
                            if row["ok"]:
                                t = json.load(open(stats))["throughput"]
                                row["prefill"] = t["prefill_tokens"] / t["prefill_seconds"]
                                row["decode"] = t["decode_tokens"] / t["decode_seconds"]
                                row["equal"] = open(out).read() == open(ref).read()
                                row["bound"] = run_bound(json.load(open(stats)), r["err"], n, run_rate, held)
                                row["oracle"] = run_bound(json.load(open(stats)), r["err"], n, run_rate)
                            else:
                                row["error"] = r["err"].strip().splitlines()[-1][:200] if r["err"].strip() else f"exit {r['rc']}"
                        else:
                            bindir = o.peer_bin if who == "llama.cpp" else o.ik_bin
                            r = run_limited([os.path.join(bindir, "peer_decode"), gguf, str(o.threads), str(o.new)], limit, name, env,
                                            o.run_timeout, stdin_path=prompts)
                            speeds = peer_decode_speeds(r["out"]) if r["rc"] == 0 else None
                            row = {"ok": speeds is not None}
                            if speeds:
                                row["prefill"], row["decode"] = speeds
                            elif r["timed_out"]:
                                # Slower than all its tokens in the time allowed: an upper bound on its decode rate.
                                row["error"] = f"over {o.run_timeout:.0f} s"
                                row["decode_below"] = n * (o.prompt + o.new) / o.run_timeout
                            else:
                                row["error"] = f"exit {r['rc']}"
                        row.update({"routing": routing, "n": n, "ratio": ratio, "limit": limit, "run": run, "who": who,
                                    "killed": r["oom"] > 0 or (r["rc"] in (-9, 137) and not r["timed_out"]), "peak": r["peak"],
                                    "read_per_token": r["read_bytes"] / max(1, n * o.new)})
                        results.append(row)
                        json.dump({"results": results, "disk_bytes_per_s": rate, "args": vars(o)},
                                  open(os.path.join(o.out, "offload.json"), "w"), indent=1)  # kept if a later run fails
                        print(f"#   {routing} N={n} ratio {ratio} ({limit >> 20} MiB) {who}: " +
                              (f"decode {row['decode']:.1f} prefill {row['prefill']:.1f} tokens/s" if row["ok"] else row["error"]) +
                              f", read {row['read_per_token'] / 1e6:.1f} MB/token, peak {row['peak'] >> 20} MiB" +
                              (", OOM-killed" if row["killed"] else ""), flush=True)
    # The table: medians over runs, ratios to each peer, and the physical bound.
    run_rates = [r["disk_rate"] for r in results if "disk_rate" in r] or [rate]
    lines.append(f"# moerun vs llama.cpp / ik_llama.cpp under a cgroup v1 memory limit: Qwen3-MoE shape, {o.layers} layers x 128 experts "
                 f"(top-8), q4 / Q4_K_M; prompt {o.prompt}, {o.new} new tokens; {o.threads} threads; disk {rate / 1e9:.2f} GB/s (O_DIRECT, "
                 f"sequential, at the start); the bound's rate (expert reads around each moerun run) "
                 f"{min(run_rates) / 1e9:.2f}-{max(run_rates) / 1e9:.2f} GB/s")
    lines.append(f"#{'routing':>8} {'N':>2} {'ratio':>5} {'MiB':>5} {'who':>13} {'prefill':>8} {'decode':>8} {'MB/tok':>7} {'peak':>5} "
                 f"{'vs llama':>8} {'vs ik':>6} {'bound':>6} {'oracle':>6}")
    for routing in o.routing.split(","):
        for n in batches:
            for ratio in ratios:
                med, below = {}, {}
                for who in engines:
                    rs = [r for r in results if r["routing"] == routing and r["n"] == n and r["ratio"] == ratio and r["who"] == who]
                    ok = [r for r in rs if r["ok"]]
                    med[who] = statistics.median([r["decode"] for r in ok]) if ok else None
                    below[who] = max((r["decode_below"] for r in rs if "decode_below" in r), default=None)
                    pre = statistics.median([r["prefill"] for r in ok]) if ok else None
                    mb = statistics.median([r["read_per_token"] for r in rs]) / 1e6
                    peak = max(r["peak"] for r in rs) >> 20
                    extra = ""
                    if who == "moerun" and ok:
                        def of_bound(key):
                            bounds = [r[key] for r in ok if r.get(key)]
                            b = statistics.median(bounds) if bounds else None
                            return f"{med[who] / b:6.2f}" if b and b != float("inf") else f"{'-':>6}"
                        extra = "equal" if all(r.get("equal") for r in ok) else "DIFFERENT"
                        lines.append(f" {routing:>8} {n:>2} {ratio:>5} {rs[0]['limit'] >> 20:>5} {who:>13} {pre:8.1f} {med[who]:8.1f} "
                                     f"{mb:7.1f} {peak:>5} {{vs_llama}} {{vs_ik}} {of_bound('bound')} {of_bound('oracle')}" +
                                     f"  tokens {extra}")
                    else:
                        text = f"{pre:8.1f} {med[who]:8.1f}" if ok else f"{'-':>8} {'-':>8}"
                        why = "" if ok else ("  OOM-killed" if any(r["killed"] for r in rs) else "  " + rs[0].get("error", "failed"))
                        lines.append(f" {routing:>8} {n:>2} {ratio:>5} {rs[0]['limit'] >> 20:>5} {who:>13} {text} {mb:7.1f} {peak:>5}"
                                     f" {'':>8} {'':>6} {'':>6} {'':>6}{why}")
                # Fill in moerun's ratios now that every engine's median is known.
                for i in range(len(lines) - len(engines), len(lines)):
                    if "{vs_llama}" in lines[i]:
                        ours = med["moerun"]
                        def f(p):
                            if ours and med.get(p):
                                return f"{ours / med[p]:8.2f}"
                            return f"{'>' + format(ours / below[p], '.1f'):>8}" if ours and below.get(p) else f"{'-':>8}"
                        lines[i] = lines[i].replace("{vs_llama}", f("llama.cpp")).replace("{vs_ik}", f("ik_llama.cpp")[2:])
    print("\n".join(lines), flush=True)
    open(os.path.join(o.out, "offload.txt"), "w").write("\n".join(lines) + "\n")  # kept if the start-up runs fail
    startup = {}
    if o.startup_runs > 0:
        skew = 0.0 if o.routing.split(",")[0] == "uniform" else o.skew
        startup = startup_times(o, engines, synth("q4", skew), gguf_q4km(skew), env)
        more = [f"# start-up, page-cached, no limit: 6 sequences of 16 prompt + 24 new tokens, whole process, "
                f"{o.startup_runs} runs interleaved: seconds min / median / max, and moerun's median over the peer's"]
        for who, ts in startup.items():
            ratio = "" if who == "moerun" else f"  moerun / {who}: {statistics.median(startup['moerun']) / statistics.median(ts):.2f}"
            more.append(f"#   {who:>13} {min(ts):6.2f} {statistics.median(ts):6.2f} {max(ts):6.2f}{ratio}")
        print("\n".join(more), flush=True)
        lines += more
    open(os.path.join(o.out, "offload.txt"), "w").write("\n".join(lines) + "\n")
    json.dump({"results": results, "startup_s": startup, "disk_bytes_per_s": rate, "args": vars(o)},
              open(os.path.join(o.out, "offload.json"), "w"), indent=1)


if __name__ == "__main__":
    main()

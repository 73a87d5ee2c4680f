#!/usr/bin/env python3
"""Interleaved A/B of two moerun binaries on bench-peer's models: prefill and decode tokens/s.

For each run, model and batch size N, one `moerun infer --max-batch-size N` per binary, back to back
(so drift of the machine hits both alike), on bench-peer's `bench-N.jsonl` requests in --work. Prints
the medians, new over old, and the new binary's min/max. Run it on an idle machine.

  python3 launch/peer/ab_builds.py OLD_BIN NEW_BIN --work build/peer/work \\
      --models qwen3_moe-bfloat16,qwen3_moe-float32 --batches 1,8,32 --runs 3 [-- extra infer options]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--work", required=True, help="bench-peer's work directory (models and bench-N.jsonl)")
    ap.add_argument("--models", required=True, help="comma-separated model directories in --work")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", default="2")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []  # more `moerun infer` options
    o = ap.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    o.extra = extra
    bins, models = [o.old, o.new], o.models.split(",")
    ns = [int(x) for x in o.batches.split(",")]
    for m in models:
        if not os.path.isdir(os.path.join(o.work, m)):
            sys.exit(f"ab_builds: no model {m} in {o.work} (make it with launch/bench-peer.sh)")
    env = dict(os.environ, OMP_NUM_THREADS=o.threads)
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        stats, out = os.path.join(tmp, "stats.json"), os.path.join(tmp, "out.jsonl")
        for _ in range(o.runs):
            for m in models:
                for n in ns:
                    for b in bins:
                        subprocess.run([b, "infer", "--model", os.path.join(o.work, m), "--input",
                                        os.path.join(o.work, f"bench-{n}.jsonl"), "--output", out, "--stats-json", stats,
                                        "--quiet", "--max-batch-size", str(n)] + o.extra, env=env, check=True)
                        t = json.load(open(stats))["throughput"]
                        res.setdefault((m, n, b), []).append(
                            (t["prefill_tokens"] / t["prefill_seconds"], t["decode_tokens"] / t["decode_seconds"]))
    print(f"# new {o.new} over old {o.old}: medians of {o.runs} interleaved runs, tokens/s")
    for m in models:
        for n in ns:
            a, b = res[(m, n, o.old)], res[(m, n, o.new)]
            line = f"{m} N={n}:"
            for i, what in ((0, "prefill"), (1, "decode")):
                ma, mb = statistics.median(x[i] for x in a), statistics.median(x[i] for x in b)
                line += (f" {what} {ma:.1f} -> {mb:.1f} ({mb / ma:.3f}x; new min/max "
                         f"{min(x[i] for x in b):.1f}/{max(x[i] for x in b):.1f})")
            print(line, flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""An A/B of moerun binaries (or wrapper scripts adding options or environment) under the same cgroup
v1 memory limit, runs interleaved: decode tokens/s, its physical bound, and the expert cache's
counters per run. How the streaming changes of issue 41 were measured (docs/log/performance-2026.md).
Uses bench_offload's cgroup runner and bound; the models and request files are bench-offload's.

usage: ab_offload.py BIN[,BIN...] MODEL_DIR REQUESTS.jsonl N RATIO RUNS [extra infer options]
  N: sequences at once (--max-batch-size N --max-batch-tokens 256, as bench-offload runs them), or
  "default": infer's own defaults for those two, N the requests in the file
  e.g. ab_offload.py old/moerun,build/launch/moerun build/peer/work/qwen3moe-L4-q4-skew0.0 \\
         build/peer/work/offload-8.jsonl 8 2 3
"""
import sys

if sys.argv[1:2] in (["-h"], ["--help"]):  # the docstring is the usage; nothing runs
    print(__doc__)
    sys.exit(0)
import json
import os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_offload as b  # noqa: E402


def main():
    if len(sys.argv) < 7:
        sys.exit(__doc__)
    bins, model, reqs = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
    ratio, runs, extra = float(sys.argv[5]), int(sys.argv[6]), sys.argv[7:]
    defaults = sys.argv[4] == "default"
    n = sum(1 for line in open(reqs) if line.strip()) if defaults else int(sys.argv[4])
    batch = [] if defaults else ["--max-batch-size", str(n), "--max-batch-tokens", "256"]
    limit = int(b.dir_bytes(model) / ratio)
    expert_bytes = b.expert_read_bytes(bins[0], model)
    print(f"# limit {limit >> 20} MiB; the bound's disk rate: expert reads around each run (bench_offload.run_limited_rated)", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS="2", MOERUN_LOG="info")
    held = b.held_out_shares(bins[0], model, "/tmp", 128, 32, dict(env, MOERUN_LOG="warn"))
    stats, out = "/tmp/ab_offload-stats.json", "/tmp/ab_offload.out"
    for _ in range(runs):
        for m in bins:
            if os.path.exists(stats):
                os.remove(stats)
            r = b.run_limited_rated([m, "infer", "--model", model, "--input", reqs, "--quantize-dense", "q4"] + batch +
                                    ["--output", out, "--stats-json", stats] + extra,
                                    limit, f"ab-offload-{os.getpid()}", env, model, expert_bytes)
            rate = r["disk_rate"]
            if r["rc"] != 0:
                print(f"{m}: exit {r['rc']}: {r['err'][-300:]}", flush=True)
                continue
            s = json.load(open(stats))
            t, c = s["throughput"], s.get("cache", {})
            decode = t["decode_tokens"] / t["decode_seconds"]
            bound = b.run_bound(s, r["err"], n, rate, held)
            oracle = b.run_bound(s, r["err"], n, rate)
            print(f"{m}: decode {decode:.1f} tokens/s, disk {rate / 1e9:.2f} GB/s" + (f", bound {bound:.1f} ({decode / bound:.2f}), oracle {oracle:.1f} ({decode / oracle:.2f})" if bound else "") +
                  f", L1 hit {c.get('l1_hit_rate', 1.0):.3f}, read {c.get('load_read_s', 0):.1f} s, pack {c.get('load_pack_s', 0):.1f} s, "
                  f"disk busy {c.get('loading_s', 0) / (t['prefill_seconds'] + t['decode_seconds']):.2f} of the steps, "
                  f"stall {c.get('stall_s', 0):.1f} s, prefetch precision {c.get('prefetch_precision', 0):.2f} recall {c.get('prefetch_recall', 0):.2f}", flush=True)


if __name__ == "__main__":
    main()

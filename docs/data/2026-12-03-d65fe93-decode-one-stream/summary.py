#!/usr/bin/env python3
"""min / median / max per (kind, dtype, M or N) and binary of ab.sh's lines: python3 summary.py ab-amd.txt"""
import collections
import statistics
import sys

rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    kind, binary, dtype, m, a, b = line.split()
    rows[(kind, dtype, int(m), binary)].append((float(a), float(b)))
fmt = lambda v: f"{min(v):g} / {statistics.median(v):g} / {max(v):g}"
heads = {"gemm": ("ms", "of read (M <= 4) or GFLOP/s"), "infer": ("decode tok/s", "prefill tok/s")}
for key in sorted({k[:3] for k in rows}):
    for binary in ("OLD", "NEW"):
        v = rows[key + (binary,)]
        h = heads[key[0]]
        print(f"{key[0]} {key[1]} {key[2]} {binary}: {h[0]} {fmt([x for x, _ in v])}; {h[1]} {fmt([y for _, y in v])}")

#!/usr/bin/env python3
"""min / median / max per set, dtype, M and binary of in-cache-amd.txt or prefetch-quant-amd.txt:
    python3 docs/data/2026-12-03-d65fe93-decode-one-stream/sets.py docs/data/2026-12-03-d65fe93-decode-one-stream/in-cache-amd.txt"""
import collections
import statistics
import sys

rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if line.startswith("#"):
        continue
    s, binary, dtype, m, ms, rate = line.split()
    rows[(s, dtype, int(m), binary)].append((float(ms), float(rate)))
for (s, dtype, m, binary), v in sorted(rows.items()):
    ms, rate = [x for x, _ in v], [y for _, y in v]
    print(f"{s} {dtype} M={m} {binary}: ms {min(ms):g}/{statistics.median(ms):g}/{max(ms):g}  "
          f"rate {min(rate):g}/{statistics.median(rate):g}/{max(rate):g}")

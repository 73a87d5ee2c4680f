#!/usr/bin/env python3
"""Bytes of weights one decode step of one sequence reads from a GGUF MoE model: every tensor but the
token embedding (a row lookup), with the stacked expert tensors (*_exps) counted at top_k / n_expert.
docs/log/performance-2026.md, issue 25 (Q4_K_M of the bench-peer Mixtral shape).
    PYTHONPATH=build/peer/llama-cpp-python-0.3.36/vendor/llama.cpp/gguf-py \\
      /usr/bin/python3 docs/data/2026-12-03-690dd7e-gguf_step_bytes.py build/peer/work/mixtral-Q4_K_M.gguf 2"""
import sys

from gguf import GGUFReader

reader = GGUFReader(sys.argv[1])
top_k = int(sys.argv[2])
total = 0.0
for t in reader.tensors:
    if t.name == "token_embd.weight":
        continue
    n = float(t.n_bytes)
    if "_exps" in t.name:
        n *= top_k / t.shape[-1] if t.shape[-1] > 1 else 1
    total += n
print(f"{sys.argv[1]}: {total / 1e6:.1f} MB per decode step of one sequence")

#!/bin/bash
# The benchmarks run and their JSON carries the documented keys (timings themselves are not tests;
# the figures live in docs/PERFORMANCE.md).
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
"$MOERUN" bench layer --hidden 128 --experts 4 --intermediate 256 --tokens 16,64 --iters 2 --warmup 1 --json "$WORK/layer.json" > "$WORK/layer.txt"
check "bench layer: table with a verdict line and JSON rows" "$PY" - "$WORK/layer.json" "$WORK/layer.txt" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); t = open(sys.argv[2]).read()
assert "# verdict:" in t
assert len(j["rows"]) == 4
for r in j["rows"]:
    for k in ("dtype", "tokens", "layer_gflops", "matmul_gflops", "ratio"):
        assert k in r, k
    assert r["ratio"] > 0
PY
"$MOERUN" bench gemm --rows 256 --cols 128 --m 1,32,128 --weight-mb 2 --iters 1 --json "$WORK/gemm.json" > "$WORK/gemm.txt"
check "bench gemm: rows per dtype and M, the kernel Matmul picks, read bandwidth and a verdict" "$PY" - "$WORK/gemm.json" "$WORK/gemm.txt" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); t = open(sys.argv[2]).read()
assert "# verdict:" in t and j["read_gbps"] > 0
rows = {(r["dtype"], r["m"]): r for r in j["results"]}
assert len(rows) == 6
for r in rows.values():
    assert r["moerun_s"] > 0 and r["onednn_s"] > 0 and r["speedup"] > 0 and r["matrices"] >= 2
    assert r["moerun_first_extra_s"] >= 0 and r["onednn_first_extra_s"] >= 0
avx512 = "avx512" in j["isa"]
assert rows[("fp32", 1)]["kernel"] == ("small-m" if avx512 else "oneDNN")
# Beyond the small-M rows the panel kernel takes every M (batch invariance), bf16 too where the
# CPU has AVX512_BF16 (with AMX, its tiles, and at every M).
assert rows[("fp32", 32)]["kernel"] == rows[("fp32", 128)]["kernel"] == ("panel" if avx512 else "oneDNN")
bf16_panel = j["isa"] in ("avx512_core_bf16", "avx512_core_amx")
assert rows[("bf16", 32)]["kernel"] == ("panel" if bf16_panel else "oneDNN"), j["isa"]
if j["isa"] == "avx512_core_amx":
    assert rows[("bf16", 1)]["kernel"] == "panel", rows[("bf16", 1)]
PY
$MPI -np 3 "$MOERUN" bench infer --layers 2 --hidden 128 --intermediate 256 --heads 4 --kv-heads 2 --head-dim 32 \
  --batch 8 --prompt-len 4 --new-tokens 4 --json "$WORK/infer.json" > "$WORK/infer.txt"
check "bench infer at np 3: tokens/s, ranks, routers and per-role phases" "$PY" - "$WORK/infer.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["ranks"] == 3 and j["routers"] == 1 and j["tokens_per_s"] > 0
assert set(j["phases"]) == {"router", "expert"}
assert j["phases"]["router"]["attention"] > 0 and j["phases"]["expert"]["expert_compute"] > 0
assert j["single_process_tokens_per_s"] > 0
PY
$MPI -np 3 "$MOERUN" bench infer --cache-compare --gate-skew 1 --layers 3 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 \
  --head-dim 16 --batch 4 --prompt-len 4 --new-tokens 4 --json "$WORK/cache.json" > "$WORK/cache.txt"
check "bench infer --cache-compare: all-resident, lru, hotness and affinity rows with cache counters" "$PY" - "$WORK/cache.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert [r["mode"] for r in j["rows"]] == ["all-resident", "lru", "hotness", "affinity"]
assert j["rows"][0]["ratio_vs_all_resident"] == 1.0
assert 0 < j["top2_share"]["min"] <= j["top2_share"]["max"] <= 1, j["top2_share"]
for r in j["rows"][1:]:
    assert r["tokens_per_s"] > 0 and 0 <= r["l1_hit_rate"] <= 1 and r["l3_bytes_read"] > 0, r
PY
# q4 experts with bf16's L1 bytes (issue 25): the same budget, 3.2x the experts in it; outputs equal
# the all-resident run's in every mode.
CC=(--cache-compare --gate-skew 1 --layers 3 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --head-dim 16 --batch 4
    --prompt-len 4 --new-tokens 4 --l1-fraction 0.25)
"$MOERUN" bench infer "${CC[@]}" --dtype bfloat16 --json "$WORK/cache-bf16.json" > /dev/null
"$MOERUN" bench infer "${CC[@]}" --dtype q4 --l1-budget-of bfloat16 --json "$WORK/cache-q4.json" > "$WORK/cache-q4.txt"
check "bench infer --cache-compare at q4 with bf16's L1 bytes: same budget, higher L1 hit rate, same outputs" "$PY" - \
  "$WORK/cache-bf16.json" "$WORK/cache-q4.json" <<'PY'
import json, sys
b, q = (json.load(open(p)) for p in sys.argv[1:])
assert q["expert_format"] == "q4" and b["expert_format"] == "bfloat16"
for rb, rq in zip(b["rows"][1:], q["rows"][1:]):
    assert rb["l1_bytes"] == rq["l1_bytes"] > 0, (rb["l1_bytes"], rq["l1_bytes"])
    assert rq["l1_hit_rate"] > rb["l1_hit_rate"], (rq["mode"], rq["l1_hit_rate"], rb["l1_hit_rate"])
assert all(r["outputs_equal_all_resident"] for r in b["rows"] + q["rows"])
PY
"$MOERUN" bench infer --scoring-compare --runs 2 --layers 2 --hidden 64 --intermediate 96 --heads 4 --kv-heads 2 --head-dim 16 \
  --vocab 1000 --batch 4 --prompt-len 32 --json "$WORK/scoring.json" > "$WORK/scoring.txt"
check "bench infer --scoring-compare: three modes, two runs each, the LM head counted for the scored rows" "$PY" - "$WORK/scoring.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["modes"]
assert sorted(m) == ["prefill", "prompt-logprobs", "second-half"], m
assert all(len(v["tokens_per_s"]) == 2 and min(v["tokens_per_s"]) > 0 for v in m.values()), m
# every prompt row through the LM head takes longer than one row per prompt
assert min(m["prompt-logprobs"]["head_s"]) > max(m["prefill"]["head_s"]), m
PY
finish

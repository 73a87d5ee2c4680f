#!/bin/bash
# `bench --sweep`: the JSON and CSV parse and hold exactly the requested runnable points, with
# efficiency 1 at each series' first point; launch/plot-bench.py turns the committed sample CSVs
# (tests/data/) and the fresh ones into PNGs of the documented size.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
DATA=$(cd "$(dirname "$0")/../data" && pwd)
PLOT=$(cd "$(dirname "$0")/../../launch" && pwd)/plot-bench.py

$MPI -np 4 "$MOERUN" bench infer --sweep --sweep-ranks 1,2,4 --sweep-nodes 1,2 --layers 2 --hidden 128 --intermediate 256 \
  --heads 4 --kv-heads 2 --head-dim 32 --batch 4 --prompt-len 4 --new-tokens 2 \
  --json "$WORK/infer.json" --csv "$WORK/infer.csv" > "$WORK/infer.txt"
check "infer sweep: every runnable point of weak and strong, the unrunnable ones named" "$PY" - "$WORK/infer.json" "$WORK/infer.csv" <<'PY'
import csv, json, sys
j = json.load(open(sys.argv[1]))
rows = list(csv.DictReader(open(sys.argv[2])))
# (ranks, nodes) runnable at 1 router per node: 1/1, 2/1, 4/1, 4/2; 1/2 and 2/2 are not.
want = {(s, r, n) for s in ("weak", "strong") for (r, n) in ((1, 1), (2, 1), (4, 1), (4, 2))}
got = {(x["scaling"], x["ranks"], x["nodes"]) for x in j["rows"]}
assert got == want, got
assert len(j["skipped"]) == 4, j["skipped"]
assert len(rows) == len(j["rows"]) and {(x["scaling"], int(x["ranks"]), int(x["nodes"])) for x in rows} == want
for x in j["rows"]:
    assert x["tokens_per_s"] > 0 and x["tokens"] > 0
    assert x["phases"]["attention"] > 0
    if x["ranks"] == 1: assert abs(x["efficiency"] - 1) < 1e-12
# weak scaling: batch grows with the expert ranks (1 -> 3 at 4 ranks/1 node); strong keeps it
b = {(x["scaling"], x["ranks"], x["nodes"]): x["batch"] for x in j["rows"]}
assert b[("weak", 4, 1)] == 3 * b[("weak", 1, 1)] and b[("strong", 4, 1)] == b[("strong", 1, 1)]
PY

$MPI -np 4 "$MOERUN" bench a2a --sweep --sweep-ranks 2,4 --sweep-nodes 1,2 --sweep-bytes 65536 --iters 2 --warmup 1 \
  --json "$WORK/a2a.json" --csv "$WORK/a2a.csv" > "$WORK/a2a.txt"
check "a2a sweep: mpi and hier at every point, strong scaling divides the bytes" "$PY" - "$WORK/a2a.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
got = {(x["scaling"], x["algo"], x["ranks"], x["nodes"]) for x in j["rows"]}
want = {(s, a, r, n) for s in ("weak", "strong") for a in ("mpi", "hier") for (r, n) in ((2, 1), (2, 2), (4, 1), (4, 2))}
assert got == want, got
for x in j["rows"]:
    assert x["algbw_gbps"] > 0
    want_bytes = 65536 if x["scaling"] == "weak" else 65536 * 2 // x["ranks"]
    assert x["bytes_per_rank"] == want_bytes, x
PY

set +e
"$MOERUN" bench infer --sweep --sweep-ranks 0,2 --json "$WORK/bad.json" 2> "$WORK/err"; rc=$?
"$MOERUN" bench a2a --sweep --scaling sideways 2> "$WORK/err2"; rc2=$?
set -e
check "sweep options: a rank count of 0 and an unknown scaling exit 2, naming the option, no output" bash -c \
  "[ $rc -eq 2 ] && grep -q -- '--sweep-ranks' '$WORK/err' && [ $rc2 -eq 2 ] && grep -q -- '--scaling' '$WORK/err2' && [ ! -e '$WORK/bad.json' ]"

png_size() { "$PY" -c 'import struct,sys; d=open(sys.argv[1],"rb").read(24); assert d[:8]==b"\x89PNG\r\n\x1a\n"; print("%dx%d" % struct.unpack(">II", d[16:24]))' "$1"; }
check "plot-bench.py writes the PNGs from the committed sample CSVs" "$PY" "$PLOT" --out "$WORK/png" \
  "$DATA/sample-a2a.csv" "$DATA/sample-sweep-infer.csv" "$DATA/sample-sweep-a2a.csv"
for f in a2a-bandwidth sweep-infer-throughput sweep-infer-efficiency sweep-infer-phases sweep-a2a-throughput sweep-a2a-efficiency; do
  check "$f.png is 1000x500 and not blank" test "$(png_size "$WORK/png/$f.png" 2>/dev/null)" = "1000x500" -a "$(stat -c %s "$WORK/png/$f.png" 2>/dev/null || echo 0)" -gt 10000
done
check "plot-bench.py plots the sweep just run" "$PY" "$PLOT" --out "$WORK/png2" "$WORK/infer.csv" "$WORK/a2a.csv"
printf 'a,b\n1,2\n' > "$WORK/bogus.csv"
check "plot-bench.py: a CSV that is not moerun's fails, naming the file" bash -c \
  "! '$PY' '$PLOT' --out '$WORK/png3' '$WORK/bogus.csv' 2> '$WORK/err' && grep -q 'bogus.csv: not a moerun bench CSV' '$WORK/err'"
finish

#!/bin/bash
# Decode tokens/s of one model shape in several expert formats, interleaved (a round runs every
# format at every N before the next round), so that a slower machine minute hits all alike.
# The models are `moerun synth` of the same seed and shape (DeepSeek-V3's layers at a Kimi-like
# expert width by default), one per format; each run is `moerun infer` of N sequences of 16 prompt
# tokens and 64 new ones, and the figure is the decode-only rate of its throughput line.
#   usage: launch/bench-formats.sh [OUT_FILE]
#   env:   FORMATS="q4 int4"  NS="1 8 32"  ROUNDS=5  SHAPE="--family deepseek_v3 ..."  MOERUN=build/launch/moerun
# Prints (and writes to OUT_FILE) a row per run and min/median/max per format and N, then each
# format's median over the first's.
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/dev/null}
MOERUN=${MOERUN:-build/launch/moerun}
FORMATS=${FORMATS:-q4 int4}
NS=${NS:-1 8 32}
ROUNDS=${ROUNDS:-5}
SHAPE=${SHAPE:---family deepseek_v3 --layers 4 --experts 64 --top-k 8 --hidden 1024 --intermediate 512 --heads 8 --kv-heads 8 --head-dim 64 --vocab 32000 --max-position 512 --seed 7}
[ -x "$MOERUN" ] || { echo "bench-formats: $MOERUN not built (launch/test.sh builds it)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for f in $FORMATS; do
  # shellcheck disable=SC2086
  "$MOERUN" synth --out "$work/$f" --dtype "$f" $SHAPE > /dev/null
done
for n in $NS; do
  python3 - "$work/r$n.jsonl" "$n" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": f"r{i}", "prompt_tokens": [(7 * i + k) % 31000 + 3 for k in range(16)], "max_new_tokens": 64}) + "\n")
PY
done
{
  echo "# launch/bench-formats.sh $(date -u +%F) commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "# synth $SHAPE; N sequences of 16 prompt tokens, 64 new; --max-batch-size N; decode-only tokens/s; $ROUNDS rounds, interleaved"
  echo "# round format N tokens/s"
} | tee "$OUT"
for round in $(seq "$ROUNDS"); do
  for n in $NS; do
    for f in $FORMATS; do
      rate=$("$MOERUN" infer --model "$work/$f" --input "$work/r$n.jsonl" --output "$work/o.jsonl" --max-batch-size "$n" 2>&1 |
        sed -n 's/.*decode-only steps (\([0-9.]*\) tokens\/s).*/\1/p')
      echo "$round $f $n $rate" | tee -a "$OUT"
    done
  done
done
python3 - "$OUT" "$FORMATS" "$NS" <<'PY' | tee -a "$OUT"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l[0].isdigit()]
formats, ns = sys.argv[2].split(), sys.argv[3].split()
med = {}
for n in ns:
    for f in formats:
        v = sorted(float(r[3]) for r in rows if r[1] == f and r[2] == n)
        med[f, n] = statistics.median(v)
        print(f"# {f:6s} N {n:3s} min {v[0]:8.1f} median {med[f, n]:8.1f} max {v[-1]:8.1f} tokens/s")
for n in ns:
    print(f"# N {n:3s} " + "  ".join(f"{f}/{formats[0]} {med[f, n] / med[formats[0], n]:.3f}" for f in formats[1:]))
PY

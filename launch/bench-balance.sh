#!/usr/bin/env bash
# Expert-parallel balance on a skewed workload (issue 27): step time and the counted imbalance of
# round-robin, a placement planned from a routing trace, and planned + replicas, interleaved in one
# run (min / median / max over --runs), at --np ranks (1 router, the rest expert ranks).
# The trace comes from one request set, the measured runs use another. The imbalance (the busiest
# expert rank's rows per layer and step over the mean, from --stats-json) is the bar; step times on
# an oversubscribed 2-core machine are noisy and shown for what they are.
#
# Usage: launch/bench-balance.sh [--np 5] [--runs 3] [--redundant 4] [--skew 1.0] [--dtype q8]
#                                [--hidden 512] [--intermediate 1024] [--experts 16] [--layers 4]
# Output: the table on stdout and build/bench-balance/balance.{txt,json}.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
NP=5 RUNS=3 REDUNDANT=4 SKEW=1.0 DTYPE=q8 HIDDEN=512 FF=1024 EXPERTS=16 LAYERS=4
while [ $# -gt 0 ]; do
  case $1 in
    --np) NP=$2; shift 2 ;; --runs) RUNS=$2; shift 2 ;; --redundant) REDUNDANT=$2; shift 2 ;;
    --skew) SKEW=$2; shift 2 ;; --dtype) DTYPE=$2; shift 2 ;; --hidden) HIDDEN=$2; shift 2 ;;
    --intermediate) FF=$2; shift 2 ;; --experts) EXPERTS=$2; shift 2 ;; --layers) LAYERS=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-balance: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
done
source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" python3
moerun_build "$ROOT" "$BUILD" moerun
MOERUN=$BUILD/launch/moerun
OUT=$BUILD/bench-balance
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun --oversubscribe --bind-to none -np "$NP")

"$MOERUN" synth --out "$WORK/m" --layers "$LAYERS" --experts "$EXPERTS" --top-k 2 --hidden "$HIDDEN" --heads 8 --kv-heads 4 \
  --head-dim $((HIDDEN / 8)) --intermediate "$FF" --vocab 1000 --max-position 512 --eos 999 --shards 2 --seed 11 --quiet \
  --gate-skew "$SKEW" --dtype "$DTYPE"
for set in a:3 b:4; do
  python3 - "$WORK/${set%%:*}.jsonl" "${set##*:}" <<'PY'
import json, random, sys
rng = random.Random(int(sys.argv[2]))
with open(sys.argv[1], "w") as f:
    for i in range(64):
        toks = [rng.randint(1, 998) for _ in range(96 + (i * 13) % 64)]
        f.write(json.dumps({"id": f"r{i}", "prompt_tokens": toks, "max_new_tokens": 16}) + "\n")
PY
done
"${MPI[@]}" "$MOERUN" infer --model "$WORK/m" --input "$WORK/a.jsonl" --output "$WORK/a-out.jsonl" --quiet --trace "$WORK/t.h5"
"$MOERUN" placement plan --model "$WORK/m" --trace "$WORK/t.h5" --nodes 1 --ranks-per-node "$NP" --out "$WORK/planned.json" > /dev/null
"$MOERUN" placement plan --model "$WORK/m" --trace "$WORK/t.h5" --nodes 1 --ranks-per-node "$NP" --redundant "$REDUNDANT" \
  --out "$WORK/replicas.json" > /dev/null
"$MOERUN" infer --model "$WORK/m" --input "$WORK/b.jsonl" --output "$WORK/ref.jsonl" --quiet
for run in $(seq 1 "$RUNS"); do
  for p in round-robin planned replicas; do
    placement=$p; [ $p != round-robin ] && placement=$WORK/$p.json
    "${MPI[@]}" "$MOERUN" infer --model "$WORK/m" --input "$WORK/b.jsonl" --output "$WORK/$p-$run.jsonl" --quiet \
      --placement "$placement" --stats-json "$WORK/$p-$run.json"
    cmp -s "$WORK/ref.jsonl" "$WORK/$p-$run.jsonl" || { echo "bench-balance: $p changed the output" >&2; exit 1; }
  done
done
python3 - "$WORK" "$RUNS" "$OUT" "np $NP, $DTYPE experts, d=$HIDDEN, ff=$FF, $EXPERTS experts top-2, $LAYERS layers, gate skew $SKEW, +$REDUNDANT slots per layer" <<'PY'
import json, statistics, sys
work, runs, out, what = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows, doc = [], {"setup": what, "policies": {}}
def mmm(v):
    return f"{min(v):.4g} / {statistics.median(v):.4g} / {max(v):.4g}"
for p in ("round-robin", "planned", "replicas"):
    step_ms, tps, imb = [], [], []
    for r in range(1, runs + 1):
        s = json.load(open(f"{work}/{p}-{r}.json"))
        b, t = s["balance"], s["throughput"]
        step_ms.append(1e3 * (t["prefill_seconds"] + t["decode_seconds"]) / b["steps"])
        tps.append((t["prefill_tokens"] + t["decode_tokens"]) / (t["prefill_seconds"] + t["decode_seconds"]))
        imb.append(b["imbalance"])
    doc["policies"][p] = {"step_ms": step_ms, "tokens_per_s": tps, "imbalance": imb}
    rows.append(f"{p:<12} {mmm(imb):>26} {mmm(step_ms):>30} {mmm(tps):>30}")
base = statistics.median(doc["policies"]["round-robin"]["step_ms"])
lines = [f"# {what}; {runs} runs interleaved (min / median / max)",
         f"{'placement':<12} {'counted imbalance':>26} {'step ms':>30} {'tokens/s (of step time)':>30}"] + rows
for p in ("planned", "replicas"):
    lines.append(f"step time, median, {p} / round-robin: {statistics.median(doc['policies'][p]['step_ms']) / base:.3f}")
text = "\n".join(lines) + "\n"
print(text, end="")
open(f"{out}/balance.txt", "w").write(text)
json.dump(doc, open(f"{out}/balance.json", "w"), indent=1)
PY

#!/bin/bash
# Router and expert ranks as separate processes give the single-process tokens, and logits within
# 1e-4 relative, for every layout: np 2/3/4/6, 1 and 2 routers per node, virtual nodes
# (--ranks-per-node 2 and 3), round-robin and a skewed explicit placement, micro-batches 1/2/3, and
# capacity with rerouting (compared with the single-process run with the same options).
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 10 10
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet --logits-out "$WORK/ref.logits"

# Skewed placement for 4 ranks (1 router, experts on 1..3): rank 1 holds most experts.
"$PY" - "$WORK/skew.json" <<'PY'
import json, sys
json.dump({str(l): {str(e): (1 if e < 6 else 2 if e == 6 else 3) for e in range(8)} for l in range(3)}, open(sys.argv[1], "w"))
PY

compare_logits() {  # compare_logits PREFIX: every router's logits file against the reference
  "$PY" - "$WORK/ref.logits" "$1" <<'PY'
import glob, json, sys
import numpy as np
def load(paths):
    out = {}
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            out.setdefault(r["id"], []).append(np.array(r["logits"], dtype=np.float64))
    return out
ref = load([sys.argv[1]])
got = load(glob.glob(sys.argv[2]) + glob.glob(sys.argv[2] + ".*"))
assert ref.keys() == got.keys(), (sorted(ref), sorted(got))
worst = 0.0
for k in ref:
    assert len(ref[k]) == len(got[k]), k
    for a, b in zip(got[k], ref[k]):
        worst = max(worst, np.max(np.abs(a - b)) / np.max(np.abs(b)))
print(f"worst logits relative error {worst:.2e}")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}

run_case() {  # run_case NAME NP ARGS... (-x VAR[=value] goes to mpirun)
  local name=$1 np=$2; shift 2
  local out="$WORK/out-$np-$RANDOM" mpi_args=() args=()
  while [ $# -gt 0 ]; do
    if [ "$1" = "-x" ]; then mpi_args+=(-x "$2"); shift 2; else args+=("$1"); shift; fi
  done
  set -- "${args[@]}"
  if $MPI "${mpi_args[@]}" -np "$np" "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$out.jsonl" --quiet \
       --logits-out "$out.logits" --comm-timeout 60 "$@" 2> "$out.err"; then
    if cmp -s "$WORK/ref.jsonl" "$out.jsonl" && compare_logits "$out.logits" > "$out.cmp"; then
      ok "$name: same tokens, $(cat "$out.cmp")"
    else
      bad "$name: results differ ($(cat "$out.cmp" 2>/dev/null))"
    fi
  else
    bad "$name: exit $? $(tail -3 "$out.err")"
  fi
}

run_case "np 2 (1 router, 1 expert rank)" 2
run_case "np 3" 3
run_case "np 4" 4
run_case "np 6" 6
run_case "np 4, 2 routers" 4 --routers-per-node 2
run_case "np 6, 2 routers" 6 --routers-per-node 2
run_case "np 4, --ranks-per-node 2 (2 nodes)" 4 --ranks-per-node 2
run_case "np 6, --ranks-per-node 3 (2 nodes)" 6 --ranks-per-node 3
run_case "np 3, --ranks-per-node 1 --router-nodes 1 (a router node apart)" 3 --ranks-per-node 1 --router-nodes 1
MOERUN_RANKS_PER_NODE=2 run_case "np 6, MOERUN_RANKS_PER_NODE=2 (3 nodes)" 6
run_case "np 4, skewed placement file" 4 --placement "$WORK/skew.json"
run_case "np 3, 1 micro-batch" 3 --micro-batches 1
run_case "np 3, 3 micro-batches" 3 --micro-batches 3

# A step where no router has two sequences runs one micro-batch (the others would be empty, yet
# cost an exchange a layer each); with two sequences it runs the configured 2. 3 layers, 5 steps.
for batch in 1 2; do
  $MPI -np 2 "$MOERUN" bench infer --layers 3 --hidden 64 --intermediate 32 --heads 2 --kv-heads 1 --head-dim 32 --vocab 128 \
    --batch $batch --prompt-len 4 --new-tokens 5 --no-baseline --json "$WORK/mb$batch.json" > "$WORK/mb$batch.txt" 2>&1 || true
  check "bench infer --batch $batch at np 2 runs $batch micro-batch(es) a step" "$PY" -c "import json, sys
x = json.load(open(sys.argv[1]))
assert x['moe_exchanges'] == $batch * 3 * 5, x['moe_exchanges']" "$WORK/mb$batch.json"
done

# The hierarchical all-to-all gives the same results (shared memory inside a node, UCX between).
run_case "np 6, 3 virtual nodes, --a2a hier (UCX tcp)" 6 --ranks-per-node 2 --a2a hier -x UCX_TLS=tcp,self
run_case "np 6, 3 virtual nodes, --a2a hier (UCX shm)" 6 --ranks-per-node 2 --a2a hier -x UCX_TLS=shm,self
run_case "np 6, 2 nodes x (1 router + 2 experts), --a2a hier" 6 --ranks-per-node 3 --a2a hier
run_case "np 4, one node, --a2a hier" 4 --a2a hier
MOERUN_INTERNODE=mpi run_case "np 5, --ranks-per-node 2, --a2a hier over MPI" 5 --ranks-per-node 2 --a2a hier -x MOERUN_INTERNODE

# Capacity: the single-process run with the same options is the reference. Capacity is per
# micro-batch, and the defaults differ (1 in one process, 2 distributed): both get 2 explicitly.
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet --logits-out "$WORK/ref.logits" \
  --capacity-factor 1.0 --overflow reroute --stats-json "$WORK/cap1.json" --micro-batches 2
run_case "np 4, --capacity-factor 1.0 --overflow reroute" 4 --capacity-factor 1.0 --overflow reroute --micro-batches 2
check "capacity 1.0 rerouted some slots" "$PY" -c "import json,sys; sys.exit(0 if json.load(open('$WORK/cap1.json'))['rerouted_fraction'] > 0 else 1)"
finish

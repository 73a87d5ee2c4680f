#!/bin/bash
# Against a real local Slurm (cluster/slurm/local/start.sh: slurm-wlm + munge, one node): submit
# cluster/slurm/infer.sbatch with `sbatch --wait` on a small model and check its results, and run
# `srun --mpi=pmix -n 4 moerun infer`. Needs root (CI runs as root); otherwise skipped (exit 77).
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root to start slurmctld, slurmd and munged"; exit 77; fi
export MOERUN_SLURM_DIR="$WORK/slurm"
trap '"$ROOT/cluster/slurm/local/stop.sh"; rm -rf "$WORK"' EXIT
eval "$("$ROOT/cluster/slurm/local/start.sh")"
synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 8 8
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet

cd "$WORK"
timeout 180 sbatch --wait -N 1 --ntasks-per-node 4 --export=ALL,MODEL="$WORK/m",INPUT="$WORK/reqs.jsonl",OUTPUT="$WORK/batch.jsonl",MOERUN="$MOERUN",EXTRA_ARGS=--quiet \
  --output="$WORK/job-%j.log" "$ROOT/cluster/slurm/infer.sbatch" > "$WORK/sbatch.out" || cat "$WORK"/job-*.log
check "sbatch --wait infer.sbatch (1 node x 4 tasks): results equal the single-process run" cmp -s "$WORK/ref.jsonl" "$WORK/batch.jsonl"
timeout 120 srun --mpi=pmix -n 4 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/srun.jsonl" \
  2> "$WORK/srun.err" || tail -5 "$WORK/srun.err"
check "srun --mpi=pmix -n 4 moerun infer: same results" cmp -s "$WORK/ref.jsonl" "$WORK/srun.jsonl"
check "the layout under srun sees 4 ranks, 1 router, 3 expert ranks" grep -q "4 rank(s) on 1 node(s), 1 router(s), 3 expert rank(s)" "$WORK/srun.err"
# Values with commas go through the environment: sbatch --export splits its list at every comma.
OUT_DIR="$WORK/scaling" MOERUN="$MOERUN" PYTHON="$PY" SWEEP_RANKS=1,2,4 VIRTUAL_NODES=1,2 \
  A2A_ARGS="--iters 2 --warmup 1 --max-bytes 65536 --sweep-bytes 65536" \
  INFER_ARGS="--layers 1 --hidden 128 --intermediate 256 --heads 4 --kv-heads 2 --head-dim 32 --batch 4 --prompt-len 4 --new-tokens 2" \
  timeout 240 sbatch --wait -N 1 --ntasks-per-node 4 --export=ALL \
  --output="$WORK/scaling-%j.log" "$ROOT/cluster/slurm/bench-scaling.sbatch" > /dev/null || cat "$WORK"/scaling-*.log
check "sbatch --wait bench-scaling.sbatch: CSVs of the a2a sizes and both sweeps, and their plots" test -s "$WORK/scaling/a2a.csv" \
  -a -s "$WORK/scaling/sweep-a2a.csv" -a -s "$WORK/scaling/sweep-infer.csv" -a -s "$WORK/scaling/sweep-infer-phases.png" -a -s "$WORK/scaling/a2a-bandwidth.png"
check "bench-scaling: the infer sweep has weak and strong rows at 1, 2 and 4 ranks" "$PY" - "$WORK/scaling/sweep-infer.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert {(x["scaling"], x["ranks"]) for x in j["rows"]} == {(s, r) for s in ("weak", "strong") for r in (1, 2, 4)}, j["rows"]
PY
finish

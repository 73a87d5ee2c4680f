#!/bin/bash
# --device cuda end to end (needs a GPU; exits 77, shown as Skipped, without one): fp32 greedy
# tokens equal the CPU backend's in one process and across ranks (np 3, expert ranks on the GPU
# with an L1 of two device slots and L2 on disk, twice: the second run reads L2); gpt-oss's biased,
# clamped experts give the CPU's tokens; a bf16 model runs
# and returns every request; bench layer --device cuda prints its cuBLAS ratio.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
if ! "$MOERUN" bench layer --device cuda --tokens 1 --iters 1 --warmup 0 --experts 2 --top-k 1 --hidden 64 \
    --intermediate 64 --dtype fp32 > "$WORK/probe.txt" 2>&1; then
  echo "skipped: --device cuda cannot run here: $(tail -1 "$WORK/probe.txt")"
  exit 77
fi
synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 12 8
same_tokens() {  # same_tokens A B: every request has the same generated tokens
  "$PY" - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["id"] for r in a] == [r["id"] for r in b]
bad = [r["id"] for r, s in zip(a, b) if r["output_tokens"] != s["output_tokens"]]
assert not bad, bad
PY
}
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/cpu.jsonl" --quiet
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/gpu.jsonl" --quiet --device cuda
check "one process, fp32: --device cuda gives the CPU backend's tokens" same_tokens "$WORK/cpu.jsonl" "$WORK/gpu.jsonl"
SLOT=$((3 * 64 * 96 * 4))  # one fp32 expert in device memory (raw size; 256-byte aligned already)
for run in 1 2; do
  $MPI -np 3 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/np3-$run.jsonl" --quiet \
    --device cuda --l1-bytes $((2 * SLOT)) --l2-dir "$WORK/l2" --stats-json "$WORK/np3-$run.stats"
  check "np 3, expert ranks on the GPU, L1 = 2 device slots, run $run: the CPU backend's tokens" \
    same_tokens "$WORK/cpu.jsonl" "$WORK/np3-$run.jsonl"
done
check "the second run reads experts back from L2 (raw form)" "$PY" -c \
  "import json,sys; c=json.load(open('$WORK/np3-2.stats'))['cache']; assert c['l2_hits'] > 0 and c['evictions'] > 0, c"
# gpt-oss's experts (biases, clamped SwiGLU) on the GPU, with a dense layer on the router.
synth_model "$WORK/oss" --family gpt_oss --layer-mlp moe,dense,moe --sliding-window 4
"$MOERUN" infer --model "$WORK/oss" --input "$WORK/reqs.jsonl" --output "$WORK/oss-cpu.jsonl" --quiet
"$MOERUN" infer --model "$WORK/oss" --input "$WORK/reqs.jsonl" --output "$WORK/oss-gpu.jsonl" --quiet --device cuda
check "gpt_oss experts, fp32: --device cuda gives the CPU backend's tokens" same_tokens "$WORK/oss-cpu.jsonl" "$WORK/oss-gpu.jsonl"
synth_model "$WORK/b" --dtype bfloat16
"$MOERUN" infer --model "$WORK/b" --input "$WORK/reqs.jsonl" --output "$WORK/bf16.jsonl" --quiet --device cuda
check "bf16 model on the GPU returns every request" test "$(wc -l < "$WORK/bf16.jsonl")" -eq 12
"$MOERUN" bench layer --device cuda --tokens 64 --iters 2 --hidden 256 --intermediate 512 --dtype fp32,bf16 > "$WORK/layer.txt"
check "bench layer --device cuda reports the layer against cuBLAS" grep -q "device cuda" "$WORK/layer.txt"
finish

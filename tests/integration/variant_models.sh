#!/bin/bash
# The 2025 families' layer variants through the whole runtime, on synthetic models (`synth
# --family`): Qwen3-MoE with a dense first layer and sliding windows, gpt-oss (sinks, biases,
# clamped SwiGLU, alternating windows, yarn) with a dense layer, Qwen2-MoE with a dense layer and
# its shared expert, GLM-4.5 (half of each head rotated, sigmoid group routing, a shared expert, a
# dense first layer), MiniMax-M2 (partial RoPE, q/k norms over the projection, sigmoid routing with a
# correction bias), Qwen3-Next and Qwen3.5-MoE (Gated DeltaNet layers, gated attention, (1 + w)
# norms). Each gives the single-process tokens, and logits within 1e-4, with np 4 (flat), np 4 with
# 2 routers, np 8 as 2 nodes x 4 over the hierarchical exchange, 3 micro-batches, the expert cache
# (L1 25% + L2) and the prefix cache; hot swap gives the swapped model's output and
# --resume finishes a killed run. Prompts are longer than the windows.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"

compare() {  # compare REF_PREFIX GOT_PREFIX: same tokens (per id), logits within 1e-4 relative
  "$PY" - "$1" "$2" <<'PY'
import glob, json, sys
import numpy as np
def load(prefix, suffix):
    out = {}
    for p in glob.glob(prefix + suffix) + glob.glob(prefix + suffix + ".*"):
        for line in open(p):
            r = json.loads(line)
            out.setdefault(r["id"], []).append(r)
    return out
ref_t, got_t = load(sys.argv[1], ".jsonl"), load(sys.argv[2], ".jsonl")
assert ref_t.keys() == got_t.keys(), (sorted(ref_t), sorted(got_t))
for k in ref_t:
    assert ref_t[k][0]["output_tokens"] == got_t[k][0]["output_tokens"], (k, ref_t[k][0], got_t[k][0])
ref_l, got_l = load(sys.argv[1], ".logits"), load(sys.argv[2], ".logits")
worst = 0.0
if ref_l:
    for k in ref_l:
        for a, b in zip(got_l[k], ref_l[k]):
            a, b = np.array(a["logits"]), np.array(b["logits"])
            worst = max(worst, float(np.max(np.abs(a - b)) / np.max(np.abs(b))))
print(f"worst logits relative error {worst:.1e}")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}

# prompts FILE: 8 requests, prompts of 3 to 24 tokens (past the windows of 4 and 6)
prompts() {
  : > "$1"
  for i in $(seq 0 7); do
    local len=$(( (i * 5) % 22 + 3 )) toks="1"
    for j in $(seq 1 $((len - 1))); do toks="$toks, $(( (i * 31 + j * 17) % 198 + 1 ))"; done
    echo "{\"id\": \"r$i\", \"prompt_tokens\": [$toks], \"max_new_tokens\": 8}" >> "$1"
  done
}
prompts "$WORK/reqs.jsonl"

variant_case() {  # variant_case FAMILY MODEL NAME NP ARGS...
  local fam=$1 m=$2 name=$3 np=$4; shift 4
  local out="$WORK/$fam-$np-$RANDOM"
  local run=("$MOERUN")
  [ "$np" -gt 1 ] && run=($MPI -np "$np" "$MOERUN")
  if "${run[@]}" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$out.jsonl" --logits-out "$out.logits" --quiet \
       --comm-timeout 60 "$@" 2> "$out.err" && compare "$WORK/$fam-ref" "$out" > "$out.cmp" 2>&1; then
    ok "$fam: $name: same tokens, $(cat "$out.cmp")"
  else
    bad "$fam: $name: $(tail -3 "$out.err" "$out.cmp" 2>/dev/null | tr '\n' ' ')"
  fi
}

family_model() {  # family_model DIR FAMILY SEED
  local dir=$1 fam=$2 seed=$3
  case $fam in
    qwen3_moe) SYNTH_SEED=$seed synth_model "$dir" --family qwen3_moe --layer-mlp dense,moe,moe --dense-intermediate 160 \
                 --layer-types sliding,full,sliding --sliding-window 6 ;;
    gpt_oss) SYNTH_SEED=$seed synth_model "$dir" --family gpt_oss --layer-mlp moe,dense,moe --sliding-window 4 ;;
    qwen2_moe) SYNTH_SEED=$seed synth_model "$dir" --family qwen2_moe --layer-mlp moe,moe,dense ;;
    glm4_moe) SYNTH_SEED=$seed synth_model "$dir" --family glm4_moe ;;  # a dense first layer, half of each head rotated
    minimax_m2) SYNTH_SEED=$seed synth_model "$dir" --family minimax_m2 --layer-mlp moe,dense,moe ;;
    # Gated DeltaNet in layers 0 and 1 (a recurrent state per sequence), gated full attention in 2.
    qwen3_next) SYNTH_SEED=$seed synth_model "$dir" --family qwen3_next --layer-mlp moe,dense,moe ;;
    # Qwen3.5-MoE: the same layer kinds from its own config (separate DeltaNet projections at convert).
    qwen3_5_moe) SYNTH_SEED=$seed synth_model "$dir" --family qwen3_5_moe --layer-mlp moe,dense,moe ;;
  esac
}

for fam in ${VARIANT_FAMILIES:-qwen3_moe gpt_oss qwen2_moe glm4_moe minimax_m2 qwen3_next qwen3_5_moe}; do
  m="$WORK/$fam"
  family_model "$m" $fam 11
  "$MOERUN" inspect --model "$m" > "$WORK/$fam.inspect"
  check "$fam: inspect shows the dense layers and the variants" grep -q "dense MLP layers 1 of" "$WORK/$fam.inspect"
  "$MOERUN" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$WORK/$fam-ref.jsonl" --logits-out "$WORK/$fam-ref.logits" --quiet
  experts=$(sed -n 's/^  experts *[0-9]* (\([0-9]*\) experts.*/\1/p' "$WORK/$fam.inspect")
  slot=$(expert_slot_bytes "$m")
  variant_case $fam "$m" "np 4 (1 router, 3 expert ranks)" 4 --micro-batches 1
  variant_case $fam "$m" "np 4, 2 routers" 4 --routers-per-node 2
  variant_case $fam "$m" "np 8, 2 nodes x 4, --a2a hier" 8 --ranks-per-node 4 --a2a hier
  variant_case $fam "$m" "np 3, 3 micro-batches" 3 --micro-batches 3
  variant_case $fam "$m" "expert cache, L1 25% + L2" 1 --l1-bytes $((experts * slot / 4)) --l2-dir "$WORK/$fam-l2"
  variant_case $fam "$m" "np 3, expert cache on the expert ranks" 3 --l1-bytes $((experts * slot / 8)) --l2-dir "$WORK/$fam-l2b"
  # The prefix cache: the same prompts twice over; the second pass reuses the first's blocks.
  cat "$WORK/reqs.jsonl" <(sed 's/"id": "r/"id": "again-r/' "$WORK/reqs.jsonl") > "$WORK/twice.jsonl"
  "$MOERUN" infer --model "$m" --input "$WORK/twice.jsonl" --output "$WORK/$fam-twice.jsonl" --quiet --max-batch-size 8
  "$MOERUN" infer --model "$m" --input "$WORK/twice.jsonl" --output "$WORK/$fam-pc.jsonl" --quiet --max-batch-size 8 \
    --prefix-cache-mb 8 --prefix-cache-block 4 --stats-json "$WORK/$fam-pc.json"
  # Each sequence's recurrent state is its own: alone or in a batch of 8, the same tokens.
  if [ $fam = qwen3_next ] || [ $fam = qwen3_5_moe ]; then
    "$MOERUN" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$WORK/$fam-alone.jsonl" --quiet --max-batch-size 1
    check "$fam: one sequence at a time gives the batch's tokens" cmp -s "$WORK/$fam-ref.jsonl" "$WORK/$fam-alone.jsonl"
  fi
  check "$fam: prefix cache: the same tokens, prefill skipped" bash -c "cmp -s '$WORK/$fam-twice.jsonl' '$WORK/$fam-pc.jsonl' &&
    $PY -c \"import json; p = json.load(open('$WORK/$fam-pc.json'))['prefix_cache']; assert p['skipped_prefill_tokens'] > 0, p\""
done

if [ -d "$WORK/gpt_oss" ]; then
# Hot swap on a model with a dense layer: the experts of another seed, all of them, before the first
# step, give the output of a model built from the first one's dense part and the second one's experts.
family_model "$WORK/b" gpt_oss 12
mkdir "$WORK/ab" && cp "$WORK/gpt_oss/model.h5" "$WORK/ab/" && cp "$WORK/b"/experts-*.h5 "$WORK/ab/"
"$PY" "$(dirname "$0")/rebind_shards.py" "$WORK/ab"
"$MOERUN" infer --model "$WORK/ab" --input "$WORK/reqs.jsonl" --output "$WORK/ab.jsonl" --quiet
cat > "$WORK/swap.json" <<JSON
{"swaps": [{"shard": "$WORK/b/experts-00000.h5", "experts": "all"}, {"shard": "$WORK/b/experts-00001.h5", "experts": "all"}]}
JSON
check "gpt_oss: the swapped experts change the output (else the swap check proves nothing)" bash -c "! cmp -s '$WORK/ab.jsonl' '$WORK/gpt_oss-ref.jsonl'"
$MPI -np 4 "$MOERUN" infer --model "$WORK/gpt_oss" --input "$WORK/reqs.jsonl" --output "$WORK/swapped.jsonl" --quiet --micro-batches 1 \
  --swap-control "$WORK/swap.json"
check "gpt_oss: hot swap of every expert (np 4): the swapped model's output" cmp -s "$WORK/ab.jsonl" "$WORK/swapped.jsonl"
fi

# --resume after SIGKILL, on the Qwen3-MoE model with its dense layer and on Qwen3-Next (its
# recurrent states start again with the resumed requests): the final file equals an uninterrupted run.
for i in $(seq 0 39); do echo "{\"id\": \"k$i\", \"prompt_tokens\": [1, $((i + 2)), $((i + 3)), 7, 9, 11, 13, 15], \"max_new_tokens\": 24}"; done > "$WORK/many.jsonl"
for fam in qwen3_moe qwen3_next qwen3_5_moe; do
  [ -d "$WORK/$fam" ] || continue
  m="$WORK/$fam"
  "$MOERUN" infer --model "$m" --input "$WORK/many.jsonl" --output "$WORK/full-$fam.jsonl" --quiet --max-batch-size 1
  kill_after_journal "$WORK/out-$fam.jsonl" 3 "$MOERUN" infer --model "$m" --input "$WORK/many.jsonl" --output "$WORK/out-$fam.jsonl" --quiet --max-batch-size 1
  before=$(wc -l < "$WORK/out-$fam.jsonl.journal" 2>/dev/null || echo 0)
  "$MOERUN" infer --model "$m" --input "$WORK/many.jsonl" --output "$WORK/out-$fam.jsonl" --quiet --max-batch-size 1 --resume
  check "$fam: --resume after SIGKILL ($before of 40 journaled) equals the uninterrupted run" \
    bash -c "[ $before -ge 3 ] && [ $before -lt 40 ] && cmp -s '$WORK/full-$fam.jsonl' '$WORK/out-$fam.jsonl'"
done
finish

#!/bin/bash
# Batch invariance (issue 44): a request's tokens, log-probs and logits are the same bits whatever
# shares its steps, for float32, bf16, q8, q4, int4, mxfp4 and fp8-block models. Each against one process
# with the defaults: every request alone (--max-batch-size 1), prompts in 37-token chunks, the
# prefix cache on, np 4 with 2 routers, np 3 with 3 micro-batches, and two placements that
# replicate every expert (the routers split its rows among 2 or 3 holders). The GEMMs must run in
# the hand kernels for float32 and bf16 (AVX-512F; AVX512_BF16, with AMX tiles where the CPU has
# them): elsewhere oneDNN picks kernels by row count, and those dtypes are skipped with the reason. Then --resume, and the other
# layer kinds (DeltaNet, MLA, sinks and sliding windows) in float32.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"

# 14 requests: 6 share a 40-token prefix (the prefix cache), lengths 3-110, all with log-probs and
# 3 scored over their prompts.
"$PY" - "$WORK/reqs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
shared = [rng.randint(3, 197) for _ in range(40)]
with open(sys.argv[1], "w") as f:
    for i in range(14):
        n = 3 + (i * 41) % 108
        toks = [1] + (shared + [rng.randint(3, 197) for _ in range(n)] if i % 2 == 0 and i < 12 else [rng.randint(3, 197) for _ in range(n)])
        r = {"id": f"r{i}", "prompt_tokens": toks, "max_new_tokens": 6, "logprobs": 3}
        if i % 5 == 1:
            r["prompt_logprobs"] = 2
        f.write(json.dumps(r) + "\n")
PY
# Placements for np 4 (1 router, expert ranks 1-3): every expert on two ranks, and on all three.
"$PY" - "$WORK" <<'PY'
import json, sys
two = {str(l): {str(e): [1 + e % 3, 1 + (e + 1) % 3] for e in range(8)} for l in range(3)}
three = {str(l): {str(e): [1 + (e + j) % 3 for j in range(3)] for e in range(8)} for l in range(3)}
json.dump(two, open(sys.argv[1] + "/two.json", "w"))
json.dump(three, open(sys.argv[1] + "/three.json", "w"))
PY


stat_of() {  # stat_of SECTION FIELD: from the last case's --stats-json
  "$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]][sys.argv[3]])" "$last.stats" "$1" "$2" 2>/dev/null || echo 0
}

# float32 and bf16 need the hand kernels; q8 and q4 run row-independent kernels everywhere.
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
for dtype in float32 bfloat16 q8 q4 int4 mxfp4 fp8-block; do
  if [ "$dtype" = float32 ] && [[ " $flags " != *" avx512f "* ]]; then
    echo "skip float32: this CPU has no AVX-512F (its GEMMs run in oneDNN, not batch-invariant)"; continue
  fi
  if [ "$dtype" = bfloat16 ] && [[ " $flags " != *" avx512_bf16 "* ]]; then
    echo "skip bfloat16: this CPU has no AVX512_BF16 (its bf16 GEMMs run in oneDNN, not batch-invariant)"; continue
  fi
  m="$WORK/$dtype"
  SYNTH_HIDDEN=128 SYNTH_HEAD_DIM=32 SYNTH_FF=192 synth_model "$m" --dtype "$dtype"
  "$MOERUN" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$m-ref.jsonl" --quiet --logits-out "$m-ref.logits"
  run_case() {  # run_case NAME NP ARGS...
    local name=$1 np=$2 out="$m-$RANDOM"; shift 2
    last=$out
    local cmd=("$MOERUN" infer)
    [ "$np" -gt 1 ] && cmd=($MPI -np "$np" "$MOERUN" infer --comm-timeout 60)
    if "${cmd[@]}" --model "$m" --input "$WORK/reqs.jsonl" --output "$out.jsonl" --quiet --logits-out "$out.logits" \
         --stats-json "$out.stats" "$@" 2> "$out.err"; then
      local logits=0 output=0
      same_logits "$m-ref.logits" "$out.logits" > "$out.cmp" || logits=1
      cmp -s "$m-ref.jsonl" "$out.jsonl" || output=1
      if [ $logits -eq 0 ] && [ $output -eq 0 ]; then
        ok "$dtype, $name: tokens and log-probs identical, $(cat "$out.cmp")"
      else
        bad "$dtype, $name: results differ (output file $([ $output -eq 0 ] && echo same || echo differs), $(cat "$out.cmp" 2>/dev/null))"
      fi
    else
      bad "$dtype, $name: exit $? $(tail -3 "$out.err")"
    fi
  }
  run_case "every request alone" 1 --max-batch-size 1
  run_case "prompts in 37-token chunks" 1 --max-batch-tokens 37
  run_case "prefix cache on" 1 --prefix-cache-mb 16 --prefix-cache-block 8
  check "$dtype: the prefix cache skipped prefill tokens ($(stat_of prefix_cache skipped_prefill_tokens))" \
    [ "$(stat_of prefix_cache skipped_prefill_tokens)" -gt 0 ]
  run_case "np 4, 2 routers" 4 --routers-per-node 2
  run_case "np 3, 3 micro-batches" 3 --micro-batches 3
  run_case "np 4, every expert on 2 ranks" 4 --placement "$WORK/two.json"
  check "$dtype: experts' rows were split among replicas ($(stat_of balance split_experts) times)" \
    [ "$(stat_of balance split_experts)" -gt 0 ]
  run_case "np 4, every expert on 3 ranks, 2 micro-batches" 4 --placement "$WORK/three.json" --micro-batches 2
done

# --resume: a run killed after 3 results, finished with other batches (--max-batch-size 4), gives
# the uninterrupted run's bytes, log-probs included (float32; longer generations, so the kill lands
# mid-run).
if [ -d "$WORK/float32" ]; then
  m="$WORK/float32"
  sed 's/"max_new_tokens": 6/"max_new_tokens": 40/' "$WORK/reqs.jsonl" > "$WORK/long.jsonl"
  "$MOERUN" infer --model "$m" --input "$WORK/long.jsonl" --output "$WORK/long-ref.jsonl" --quiet
  kill_after_journal "$WORK/long-out.jsonl" 3 "$MOERUN" infer --model "$m" --input "$WORK/long.jsonl" \
    --output "$WORK/long-out.jsonl" --quiet --max-batch-size 1
  journaled=$(wc -l < "$WORK/long-out.jsonl.journal" 2>/dev/null || echo 0)
  check "float32: killed mid-run ($journaled results journaled, no final file)" \
    bash -c "[ $journaled -ge 3 ] && [ $journaled -lt 14 ] && [ ! -e '$WORK/long-out.jsonl' ]"
  "$MOERUN" infer --model "$m" --input "$WORK/long.jsonl" --output "$WORK/long-out.jsonl" --quiet --max-batch-size 4 --resume
  check "float32, --resume with other batches: tokens and log-probs identical to the uninterrupted run" \
    cmp -s "$WORK/long-ref.jsonl" "$WORK/long-out.jsonl"
fi

# The other layer kinds, float32: Gated DeltaNet with gated attention (qwen3_5_moe), MLA
# (deepseek_v3), MLA with DeepSeek Sparse Attention (deepseek_v32: its indexer keys in the cache
# rows the prefix cache keeps; glm_moe_dsa: layers that share the choice before them, per
# micro-batch; both also at np 8 with the prefix cache), sinks and sliding windows (gpt_oss).
if [[ " $flags " == *" avx512f "* ]]; then
  dtype=float32
  for family in qwen3_5_moe deepseek_v3 deepseek_v32 glm_moe_dsa gpt_oss; do
    m="$WORK/$family"
    SYNTH_LAYERS=4 SYNTH_HIDDEN=128 SYNTH_HEAD_DIM=32 SYNTH_FF=192 synth_model "$m" --family "$family"
    "$MOERUN" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$m-ref.jsonl" --quiet --logits-out "$m-ref.logits"
    dtype="$family float32"
    run_case "every request alone" 1 --max-batch-size 1
    run_case "prompts in 37-token chunks" 1 --max-batch-tokens 37
    run_case "prefix cache on" 1 --prefix-cache-mb 16 --prefix-cache-block 8
    run_case "np 4, 2 routers, 2 micro-batches" 4 --routers-per-node 2 --micro-batches 2
    case $family in *dsa*|*v32) run_case "np 8, 2 routers, prefix cache on" 8 --routers-per-node 2 --prefix-cache-mb 16 --prefix-cache-block 8 ;; esac
  done
fi
finish

#!/bin/bash
# Quantized experts end to end (issue 25; int4 issue 64): synth and convert write q8, q4, int4, mxfp4 and fp8-block,
# inspect counts their bytes, one process and np 4 give the same tokens, a 25% L1 with an L2 on
# disk gives the all-resident run's tokens (and a second run reads the packed form back from L2),
# KL divergence against the bf16 model is small and ordered (q8 < q4, q8 < int4; fp8 and mxfp4 too),
# --quantize-dense quantizes the routers' dense matrices too, and bad options fail with exit 2.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
synth_model "$WORK/bf16" --dtype bfloat16
for q in q8 q4 int4 mxfp4 fp8-block; do synth_model "$WORK/$q" --dtype $q; done
requests "$WORK/reqs.jsonl" 10 6

slot() { expert_slot_bytes "$1"; }
stored() { "$MOERUN" inspect --model "$1" | sed -n 's/^bytes per expert *\([0-9]*\) .*as stored.*/\1/p'; }
check "inspect names the expert format" bash -c "'$MOERUN' inspect --model '$WORK/q4' | grep -q 'moe-hdf5 v4, mixtral, bfloat16, experts q4'"
check "an expert's bytes: q8 17/32, q4 10/32, int4 19/64, mxfp4 17/64 of bf16's, fp8 half plus its scales; packed in memory the same" "$PY" - \
  "$(stored "$WORK/bf16")" "$(stored "$WORK/q8")" "$(stored "$WORK/q4")" "$(stored "$WORK/mxfp4")" "$(stored "$WORK/fp8-block")" \
  "$(slot "$WORK/q8")" "$(slot "$WORK/q4")" "$(slot "$WORK/mxfp4")" "$(stored "$WORK/int4")" "$(slot "$WORK/int4")" <<'PY'
import sys
b, q8, q4, mx, fp8, q8_slot, q4_slot, mx_slot, i4, i4_slot = map(int, sys.argv[1:])
# bf16: 16 bits a weight; q8: 8 + 16/32 = 8.5; q4: 4 + 32/32 = 5; int4: 4 + (16 + 8)/32 = 4.75;
# mxfp4: 4 + 8/32 = 4.25 (no padding at 64 x 96); fp8: 8, and one float32 scale per 128 x 128
# block: one for each of the three matrices
assert q8 * 32 == b * 17 and q4 * 32 == b * 10 and mx * 64 == b * 17 and fp8 == b // 2 + 3 * 4, (b, q8, q4, mx, fp8)
assert i4 * 64 == b * 19, (b, i4)
assert (q8_slot, q4_slot, mx_slot, i4_slot) == (q8, q4, mx, i4), (q8_slot, q4_slot, mx_slot, i4_slot)
PY

for q in q8 q4 int4 mxfp4 fp8-block; do
  "$MOERUN" infer --model "$WORK/$q" --input "$WORK/reqs.jsonl" --output "$WORK/$q-ref.jsonl" --quiet
  $MPI -np 4 "$MOERUN" infer --model "$WORK/$q" --input "$WORK/reqs.jsonl" --output "$WORK/$q-np4.jsonl" --quiet
  check "$q: np 4 (1 router, 3 expert ranks) gives the one-process tokens" cmp -s "$WORK/$q-ref.jsonl" "$WORK/$q-np4.jsonl"
  SLOT=$(slot "$WORK/$q")
  "$MOERUN" infer --model "$WORK/$q" --input "$WORK/reqs.jsonl" --output "$WORK/$q-l1.jsonl" --quiet \
    --l1-bytes $((6 * SLOT)) --l2-dir "$WORK/l2-$q" --stats-json "$WORK/$q-l1.stats"
  check "$q: L1 of 6 of 24 experts, L2 on disk: the all-resident tokens" cmp -s "$WORK/$q-ref.jsonl" "$WORK/$q-l1.jsonl"
  "$MOERUN" infer --model "$WORK/$q" --input "$WORK/reqs.jsonl" --output "$WORK/$q-warm.jsonl" --quiet \
    --l1-bytes $((6 * SLOT)) --l2-dir "$WORK/l2-$q" --stats-json "$WORK/$q-warm.stats"
  check "$q: a second run reads the packed experts back from L2 (no L3 reads), same tokens" "$PY" - "$WORK/$q-warm.stats" \
    "$WORK/$q-ref.jsonl" "$WORK/$q-warm.jsonl" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["cache"]
assert open(sys.argv[2]).read() == open(sys.argv[3]).read()
assert c["l3_reads"] == 0 and c["l2_hits"] > 0, c
PY
done
check "q8 and q4 tokens differ from each other (the formats are really different)" bash -c "! cmp -s '$WORK/q8-ref.jsonl' '$WORK/q4-ref.jsonl'"
check "q4 and int4 tokens differ from each other" bash -c "! cmp -s '$WORK/q4-ref.jsonl' '$WORK/int4-ref.jsonl'"
check "mxfp4 and fp8-block tokens differ from each other" bash -c "! cmp -s '$WORK/mxfp4-ref.jsonl' '$WORK/fp8-block-ref.jsonl'"

# KL divergence against the bf16 model over 1,536 scored tokens.
"$PY" -c "import json, random; random.seed(3); print(json.dumps([random.randrange(1, 199) for _ in range(3072)]))" > "$WORK/ids.json"
"$MOERUN" perplexity --model "$WORK/bf16" --tokens "$WORK/ids.json" --context 128 --save-logits "$WORK/base.h5" --quiet > /dev/null
for q in q8 q4 int4 mxfp4 fp8-block; do
  "$MOERUN" perplexity --model "$WORK/$q" --tokens "$WORK/ids.json" --context 128 --kl-base "$WORK/base.h5" --quiet \
    --json "$WORK/$q-kl.json" > /dev/null
done
check "KL against bf16: q8 < q4, both small; q8's top-1 agreement >= q4's" "$PY" - "$WORK/q8-kl.json" "$WORK/q4-kl.json" <<'PY'
import json, sys
q8, q4 = (json.load(open(p)) for p in sys.argv[1:])
k8, k4 = q8["kl_divergence"]["mean"], q4["kl_divergence"]["mean"]
print("  KL q8", k8, "q4", k4, "top-1", q8["kl_divergence"]["top1_agreement"], q4["kl_divergence"]["top1_agreement"])
assert 0 < k8 < k4 < 0.1, (k8, k4)
assert q8["kl_divergence"]["top1_agreement"] >= q4["kl_divergence"]["top1_agreement"] > 0.5
PY
check "KL against bf16: q8 < int4 (round to nearest, symmetric: above q4's least squares), small" "$PY" - "$WORK/q8-kl.json" "$WORK/int4-kl.json" "$WORK/q4-kl.json" <<'PY'
import json, sys
k8, k4i, k4 = (json.load(open(p))["kl_divergence"]["mean"] for p in sys.argv[1:])
print("  KL int4", k4i, "q4", k4, "q8", k8)
assert 0 < k8 < k4i < 0.15, (k8, k4i)
PY
check "KL against bf16: fp8 (3 mantissa bits) < mxfp4 (1), both small" "$PY" - "$WORK/fp8-block-kl.json" "$WORK/mxfp4-kl.json" <<'PY'
import json, sys
f8, mx = (json.load(open(p))["kl_divergence"]["mean"] for p in sys.argv[1:])
print("  KL fp8-block", f8, "mxfp4", mx)
assert 0 < f8 < mx < 0.2, (f8, mx)
PY

# --quantize-dense: the routers' LM head and attention quantized at load. The bf16 model with only
# those quantized moves a little; q4 experts with q8 dense layers stay near q4 alone, with q4 dense
# layers further; np 4 gives the one-process tokens.
for qd in q8 q4; do
  "$MOERUN" perplexity --model "$WORK/bf16" --tokens "$WORK/ids.json" --context 128 --kl-base "$WORK/base.h5" --quiet \
    --json "$WORK/bf16-dense-$qd-kl.json" --quantize-dense $qd > /dev/null
  "$MOERUN" perplexity --model "$WORK/q4" --tokens "$WORK/ids.json" --context 128 --kl-base "$WORK/base.h5" --quiet \
    --json "$WORK/q4-dense-$qd-kl.json" --quantize-dense $qd > /dev/null
done
check "--quantize-dense: KL of bf16 + q8 dense > 0 and < q8 experts' x 3; q4 experts + q8 dense within 1.5x of q4 alone, + q4 dense above it" \
  "$PY" - "$WORK" <<'PY'
import json, sys
kl = lambda n: json.load(open(f"{sys.argv[1]}/{n}-kl.json"))["kl_divergence"]["mean"]
d8, d4, q4, q4d8, q4d4 = kl("bf16-dense-q8"), kl("bf16-dense-q4"), kl("q4"), kl("q4-dense-q8"), kl("q4-dense-q4")
print("  KL bf16+dense q8", d8, "bf16+dense q4", d4, "q4", q4, "q4+dense q8", q4d8, "q4+dense q4", q4d4)
assert 0 < d8 < 3 * kl("q8") and d8 < d4, (d8, d4)
assert q4d8 != q4 and q4 / 1.5 < q4d8 < 1.5 * q4 < q4d4 < 0.1, (q4, q4d8, q4d4)
PY
"$MOERUN" infer --model "$WORK/q4" --input "$WORK/reqs.jsonl" --output "$WORK/q4-d8.jsonl" --quiet --quantize-dense q8
$MPI -np 4 "$MOERUN" infer --model "$WORK/q4" --input "$WORK/reqs.jsonl" --output "$WORK/q4-d8-np4.jsonl" --quiet --quantize-dense q8
check "--quantize-dense q8: np 4 gives the one-process tokens, and not those of the bf16 dense layers" \
  bash -c "cmp -s '$WORK/q4-d8.jsonl' '$WORK/q4-d8-np4.jsonl' && ! cmp -s '$WORK/q4-d8.jsonl' '$WORK/q4-ref.jsonl'"

# convert --quantize: the same checkpoint stored as q4 experts runs, and is close to the f32 conversion.
"$PY" "$(dirname "$0")/make_hf_checkpoint.py" "$WORK/hf" --hidden 64 --intermediate 96 > /dev/null
"$MOERUN" convert --from-hf "$WORK/hf" --out "$WORK/hf-f32" --quiet
"$MOERUN" convert --from-hf "$WORK/hf" --out "$WORK/hf-q4" --quantize q4 --quiet
check "convert --quantize q4 writes a v4 model with q4 experts" bash -c "'$MOERUN' inspect --model '$WORK/hf-q4' | grep -q 'experts q4'"
"$MOERUN" infer --model "$WORK/hf-q4" --input "$WORK/reqs.jsonl" --output "$WORK/hf-q4.jsonl" --quiet
check "the converted q4 model answers every request" bash -c "[ \$(wc -l < '$WORK/hf-q4.jsonl') -eq 10 ]"

expect_exit() {  # expect_exit WHAT CODE TEXT -- CMD...
  local what=$1 code=$2 text=$3; shift 4
  local out rc=0
  out=$("$@" 2>&1) || rc=$?
  if [ "$rc" -eq "$code" ] && grep -qF -- "$text" <<< "$out"; then ok "$what"; else bad "$what (exit $rc: $out)"; fi
}
expect_exit "synth --dtype q3 is a usage error" 2 "--dtype must be float32, bfloat16, q8, q4, int4, mxfp4 or fp8-block" -- "$MOERUN" synth --out "$WORK/x" --dtype q3
expect_exit "synth q8 with a hidden size not a multiple of 32" 2 "needs hidden_size (48)" -- "$MOERUN" synth --out "$WORK/x" --dtype q8 --hidden 48 --heads 4 --head-dim 12
expect_exit "convert --quantize q5 is a usage error" 2 "--quantize must be keep, none, q8, q4 or int4" -- "$MOERUN" convert --from-hf "$WORK/hf" --out "$WORK/x" --quantize q5
"$PY" "$(dirname "$0")/make_hf_checkpoint.py" "$WORK/hf48" --hidden 48 --head-dim 12 > /dev/null
expect_exit "convert --quantize of a checkpoint whose hidden size is not whole groups of 32" 2 "--quantize: " -- \
  "$MOERUN" convert --from-hf "$WORK/hf48" --out "$WORK/hf48-q4" --quantize q4 --quiet
check "... and it left no model behind" bash -c "[ ! -e '$WORK/hf48-q4/model.h5' ]"
expect_exit "infer --quantize-dense q5 is a usage error" 2 '--quantize-dense must be none, q8 or q4, not "q5"' -- \
  "$MOERUN" infer --model "$WORK/q4" --input "$WORK/reqs.jsonl" --output "$WORK/x.jsonl" --quantize-dense q5
check "... and it wrote no output" bash -c "[ ! -e '$WORK/x.jsonl' ]"
expect_exit "bench infer --l1-budget-of of an unknown format" 2 "--l1-budget-of must be float32, bfloat16, q8, q4, int4, mxfp4 or fp8-block" -- \
  "$MOERUN" bench infer --cache-compare --l1-budget-of q3
finish

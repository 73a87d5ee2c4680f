#!/bin/bash
# bf16 models on CPUs below AVX-512 (AVX2: AMD Zen 2/3, Intel client cores), where oneDNN 2.6 has no
# bf16 matmul. ONEDNN_MAX_CPU_ISA=AVX2 caps oneDNN to what such a CPU offers (moerun's own AVX-512
# kernels still run for the other formats): bf16 weights are then held widened to float32. Each
# family's tokens must equal the run without the cap, or part only at a near-tie (a margin within
# the logits' error; seen on the AMX host, where the uncapped run's bf16 sums are AMX's), and its
# logits be within 2% of their scale until then (the bf16 activations between GEMMs round
# differently once a sum's order moves: 0.3-0.6% seen; wrong weights or layouts move them by their
# whole scale), and inspect must count the widened bytes. test_matmul_avx2 checks each GEMM against
# float64. (Before, every bf16 GEMM failed there with
# "could not create a primitive descriptor"; valgrind, which hides AVX-512, showed it.)
source "$(dirname "$0")/common.sh"

"$PY" - "$WORK/reqs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(3)
with open(sys.argv[1], "w") as f:
    for i in range(5):
        toks = [1] + [rng.randint(3, 197) for _ in range(4 + 23 * i)]
        f.write(json.dumps({"id": f"r{i}", "prompt_tokens": toks, "max_new_tokens": 6}) + "\n")
PY

for family in mixtral qwen3_5_moe deepseek_v3; do
  m="$WORK/$family"
  SYNTH_LAYERS=4 SYNTH_HIDDEN=128 SYNTH_HEAD_DIM=32 SYNTH_FF=192 synth_model "$m" --family "$family" --dtype bfloat16
  "$MOERUN" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$m-native.jsonl" --quiet --logits-out "$m-native.logits"
  if ONEDNN_MAX_CPU_ISA=AVX2 "$MOERUN" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$m-avx2.jsonl" --quiet \
       --logits-out "$m-avx2.logits" 2> "$m-avx2.err"; then
    ok "$family bf16 runs with oneDNN capped at AVX2"
  else
    bad "$family bf16 with oneDNN capped at AVX2: $(tail -1 "$m-avx2.err")"
    continue
  fi
  check "$family: the same tokens (or parting at a near-tie) and logits within 2% of their scale" \
    "$PY" - "$m-native.jsonl" "$m-avx2.jsonl" "$m-native.logits" "$m-avx2.logits" <<'PY'
import json, sys
def tokens(path):
    return {r["id"]: r["output_tokens"] for r in map(json.loads, open(path))}
def logits(path):  # id -> each emitted token's logits, in order
    out = {}
    for r in map(json.loads, open(path)):
        out.setdefault(r["id"], []).append(r["logits"])
    return out
ta, tb, la, lb = tokens(sys.argv[1]), tokens(sys.argv[2]), logits(sys.argv[3]), logits(sys.argv[4])
if ta.keys() != tb.keys() or la.keys() != lb.keys() or any(len(la[k]) != len(lb[k]) for k in la):
    sys.exit("  the runs emitted different requests or token counts")
scale = max(abs(v) for steps in la.values() for step in steps for v in step)
worst, parted = 0.0, []
for k in ta:
    for t, (x, y) in enumerate(zip(la[k], lb[k])):
        worst = max(worst, max(abs(p - q) for p, q in zip(x, y)))
        if ta[k][t] != tb[k][t]:
            # A random model has near-ties: the runs may part where the uncapped run's margin for
            # its token over the other's is within the logits' error; later steps see other inputs.
            margin = x[ta[k][t]] - x[tb[k][t]]
            if margin > 2e-2 * scale:
                sys.exit(f"  {k}: token {t} is {ta[k][t]} against {tb[k][t]}, at a margin of {margin:.3g} (scale {scale:.3g})")
            parted.append(f"{k} at token {t} (margin {margin:.3g})")
            break
print(f"  max |diff| {worst:.3g}, scale {scale:.3g}" + (f"; parted at near-ties: {', '.join(parted)}" if parted else ""))
sys.exit(0 if worst <= 2e-2 * scale else 1)
PY
done

# A CPU without AVX-512 for every probe: valgrind hides AVX-512 from the programs it runs (moerun's
# own kernels then take their portable paths too). A small bf16 model, the same tokens.
m="$WORK/tiny"
SYNTH_LAYERS=2 synth_model "$m" --dtype bfloat16
"$MOERUN" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$m-native.jsonl" --quiet
if valgrind -q --error-exitcode=9 "$MOERUN" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$m-valgrind.jsonl" --quiet \
     2> "$m-valgrind.err"; then
  ok "bf16 under valgrind (no AVX-512)"
  check "bf16 under valgrind: the same tokens" cmp -s "$m-native.jsonl" "$m-valgrind.jsonl"
else
  bad "bf16 under valgrind (no AVX-512): $(grep -v -i hwloc "$m-valgrind.err" | tail -3)"
fi

# The memory plan counts bf16 matrices at 4 bytes where they are widened.
m="$WORK/mixtral"
native=$("$MOERUN" inspect --model "$m" | sed -n 's/.*, \([0-9]*\) ([^)]*) packed in memory.*/\1/p')
capped=$(ONEDNN_MAX_CPU_ISA=AVX2 "$MOERUN" inspect --model "$m" | sed -n 's/.*, \([0-9]*\) ([^)]*) packed in memory.*/\1/p')
check "an expert's L1 slot doubles when widened ($native -> $capped bytes)" test "$capped" -ge $((2 * native))
dense_native=$("$MOERUN" inspect --model "$m" | sed -n 's/^  dense weights *\([0-9.]* [KMG]*i*B\).*/\1/p')
dense_capped=$(ONEDNN_MAX_CPU_ISA=AVX2 "$MOERUN" inspect --model "$m" | sed -n 's/^  dense weights *\([0-9.]* [KMG]*i*B\).*/\1/p')
check "inspect's dense weights grow when widened ($dense_native -> $dense_capped)" test "$dense_native" != "$dense_capped"
check "inspect says why" bash -c "ONEDNN_MAX_CPU_ISA=AVX2 '$MOERUN' inspect --model '$m' | grep -q 'bf16 matrices held as float32' &&
  ! '$MOERUN' inspect --model '$m' | grep -q 'held as float32'"
finish

#!/bin/bash
# synth -> infer end to end: deterministic, batch-independent tokens, chunked prefill equals whole
# prefill, statistics and trace contents, sampling, routing options, a bf16 model.
source "$(dirname "$0")/common.sh"
synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 8 12
echo '{"id": "sampled", "prompt_tokens": [1, 5, 9], "max_new_tokens": 10, "temperature": 0.9, "top_p": 0.9, "seed": 4}' >> "$WORK/reqs.jsonl"

"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/a.jsonl" --quiet \
  --stats-json "$WORK/stats.json" --trace "$WORK/trace.h5"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/b.jsonl" --quiet
check "deterministic: two runs give identical output" cmp -s "$WORK/a.jsonl" "$WORK/b.jsonl"
check "no journal left after a complete run" test ! -e "$WORK/a.jsonl.journal"
check "one result per request, in input order" \
  bash -c "diff <(grep -o '\"id\": \"[^\"]*\"' '$WORK/reqs.jsonl' | sed 's/: /:/') <(grep -o '\"id\":\"[^\"]*\"' '$WORK/a.jsonl')"

"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/c.jsonl" --quiet --max-batch-tokens 3 --max-batch-size 2
check "chunked prefill and small batches give the same tokens" cmp -s "$WORK/a.jsonl" "$WORK/c.jsonl"

: > "$WORK/alone.jsonl"
while read -r line; do
  echo "$line" > "$WORK/one.jsonl"
  "$MOERUN" infer --model "$WORK/m" --input "$WORK/one.jsonl" --output "$WORK/one.out" --quiet
  cat "$WORK/one.out" >> "$WORK/alone.jsonl"
done < "$WORK/reqs.jsonl"
check "each request alone gives the tokens it gets in the full batch" cmp -s "$WORK/a.jsonl" "$WORK/alone.jsonl"

check "statistics JSON has the contract keys and consistent counts" "$PY" - "$WORK/stats.json" "$WORK/a.jsonl" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for k in ("tokens", "activation_rate", "expert_usage", "rerouted_fraction", "dropped_fraction", "tokens_per_s"):
    assert k in s, k
res = [json.loads(l) for l in open(sys.argv[2])]
# every prompt token and every generated token except the last of each request passes the layers
want = sum(r["prompt_len"] + len(r["output_tokens"]) - 1 for r in res)
assert s["tokens"] == want, (s["tokens"], want)
assert len(s["expert_usage"]) == 3 and all(len(l) == 8 for l in s["expert_usage"])
assert all(sum(l) == 2 * want for l in s["expert_usage"])
assert 0 < s["activation_rate"] < 1 and s["rerouted_fraction"] == 0 and s["dropped_fraction"] == 0
assert s["tokens_per_s"] > 0
PY
check "trace has one row per token per layer with valid expert ids" "$PY" - "$WORK/trace.h5" "$WORK/stats.json" <<'PY'
import json, sys, h5py, numpy as np
t = h5py.File(sys.argv[1], "r"); s = json.load(open(sys.argv[2]))
assert t.attrs["format"] == "moe-trace"
for l in range(3):
    e = t[f"layers/{l}/experts"][()]
    assert e.shape == (s["tokens"], 2) and e.min() >= 0 and e.max() < 8
    assert (np.bincount(e.ravel(), minlength=8) == np.array(s["expert_usage"][l])).all()
PY
check "sampled request differs from greedy and is reproducible" bash -c "
  grep -q '\"id\":\"sampled\"' '$WORK/a.jsonl' && grep '\"id\":\"sampled\"' '$WORK/a.jsonl' | grep -q '\"finish_reason\"'"

"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/cap.jsonl" --quiet \
  --capacity-factor 0.5 --overflow reroute --stats-json "$WORK/cap.json"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/drop.jsonl" --quiet \
  --capacity-factor 0.5 --overflow drop --stats-json "$WORK/drop.json"
check "capacity 0.5 reroutes (reroute) and drops (drop) some slots" "$PY" - "$WORK/cap.json" "$WORK/drop.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2]))
assert c["rerouted_fraction"] > 0 and d["dropped_fraction"] > 0 and d["rerouted_fraction"] == 0
PY

synth_model "$WORK/mb" --dtype bfloat16
"$MOERUN" infer --model "$WORK/mb" --input "$WORK/reqs.jsonl" --output "$WORK/bf.jsonl" --quiet
check "bfloat16 model runs and returns every request" test "$(wc -l < "$WORK/bf.jsonl")" -eq 9
"$MOERUN" inspect --model "$WORK/m" > "$WORK/inspect.txt"
check "inspect reports parameter counts and per-rank memory" \
  bash -c "grep -q 'active per token' '$WORK/inspect.txt' && grep -q 'expert rank holding 24 experts' '$WORK/inspect.txt'"
finish

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

# Per-phase capacity: drops land only in the phase that has a limit (trace: position < prompt_len
# is a prompt token).
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/capd.jsonl" --quiet --overflow drop \
  --capacity-factor-prefill 0 --capacity-factor-decode 0.3 --trace "$WORK/capd.h5" --stats-json "$WORK/capd.json"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/capp.jsonl" --quiet --overflow drop \
  --capacity-factor-prefill 0.3 --capacity-factor-decode 0 --trace "$WORK/capp.h5"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/capdef.jsonl" --quiet --overflow drop \
  --capacity-factor-decode 1.25 --stats-json "$WORK/capdef.json"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/capdef2.jsonl" --quiet --overflow drop \
  --capacity-factor-prefill 1.0 --capacity-factor-decode 1.25 --stats-json "$WORK/capdef2.json"
check "per-phase capacity drops only where it is set; a per-phase option alone defaults the other (prefill 1.0)" \
  "$PY" - "$WORK/reqs.jsonl" "$WORK/capd.h5" "$WORK/capp.h5" "$WORK/capdef.json" "$WORK/capdef2.json" "$WORK/capdef.jsonl" "$WORK/capdef2.jsonl" <<'PY'
import json, sys, h5py, numpy as np
reqs = [json.loads(l) for l in open(sys.argv[1])]
plen = np.array([len(r["prompt_tokens"]) for r in reqs])
for path, phase in ((sys.argv[2], "decode"), (sys.argv[3], "prefill")):
    t = h5py.File(path, "r")
    prefill = t["tokens/position"][()] < plen[t["tokens/request"][()] - 1]
    dropped = np.zeros(len(prefill), bool)
    for l in range(3):
        dropped |= (t[f"layers/{l}/experts"][()] < 0).any(axis=1)
    assert dropped.any(), path
    assert not (dropped & (prefill if phase == "decode" else ~prefill)).any(), (path, phase)
a, b = json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))
assert a["dropped_fraction"] == b["dropped_fraction"] and a["expert_usage"] == b["expert_usage"]
assert open(sys.argv[6]).read() == open(sys.argv[7]).read()
PY

# Dynamic top-k: P = 1 is plain top-k; a small P keeps one expert per token and layer; in between
# the activation rate falls between the two.
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/p1.jsonl" --quiet --top-p-experts 1
check "--top-p-experts 1 changes nothing" cmp -s "$WORK/a.jsonl" "$WORK/p1.jsonl"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/plo.jsonl" --quiet --top-p-experts 0.01 \
  --stats-json "$WORK/plo.json" --trace "$WORK/plo.h5"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/pmid.jsonl" --quiet --top-p-experts 0.4 \
  --stats-json "$WORK/pmid.json"
check "dynamic top-k reports the experts per token and the activation rate it reaches" \
  "$PY" - "$WORK/stats.json" "$WORK/plo.json" "$WORK/pmid.json" "$WORK/plo.h5" <<'PY'
import json, sys, h5py, numpy as np
full, lo, mid = (json.load(open(p)) for p in sys.argv[1:4])
assert full["experts_per_token"] == 2 and full["pruned_fraction"] == 0
assert lo["experts_per_token"] == 1 and lo["pruned_fraction"] == 0.5, lo
assert 1 < mid["experts_per_token"] < 2 and 0 < mid["pruned_fraction"] < 0.5, mid
assert lo["expert_activation_rate"] < mid["expert_activation_rate"] < full["expert_activation_rate"]
t = h5py.File(sys.argv[4], "r")
for l in range(3):
    e = t[f"layers/{l}/experts"][()]
    assert ((e >= 0).sum(axis=1) == 1).all() and (e[:, 0] >= 0).all()
PY

synth_model "$WORK/mb" --dtype bfloat16
"$MOERUN" infer --model "$WORK/mb" --input "$WORK/reqs.jsonl" --output "$WORK/bf.jsonl" --quiet
check "bfloat16 model runs and returns every request" test "$(wc -l < "$WORK/bf.jsonl")" -eq 9
"$MOERUN" inspect --model "$WORK/m" > "$WORK/inspect.txt"
check "inspect reports parameter counts and per-rank memory" \
  bash -c "grep -q 'active per token' '$WORK/inspect.txt' && grep -q 'expert rank holding 24 experts' '$WORK/inspect.txt'"
finish

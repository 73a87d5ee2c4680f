#!/bin/bash
# The sampling fields (issue 79, first part): top_k, min_p, presence/frequency/repetition penalties
# and logit_bias. Greedy requests with penalties and a bias choose, at every step, the argmax of the
# logits adjusted by an independent numpy implementation of vLLM's definitions over the logits
# moerun wrote (--logits-out); sampled requests with every field give the same tokens whatever
# shares their step (alone, or in a batch of 8) and at np 3; top_k 1 at temperature 1 is greedy;
# neutral fields give the plain run's bytes.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
cd "$WORK"
synth_model m
# Greedy with penalties and a bias on three prompts; sampled ones with every field; a neutral one.
cat > R <<'J'
{"id": "g1", "prompt_tokens": [1, 5, 9, 5, 7], "max_new_tokens": 12, "repetition_penalty": 1.7, "presence_penalty": 0.4, "frequency_penalty": 0.3, "logit_bias": {"17": 1.5, "3": -2}}
{"id": "g2", "prompt_tokens": [1, 44, 45], "max_new_tokens": 12, "frequency_penalty": 1.5}
{"id": "g3", "prompt_tokens": [1, 120, 80, 80, 80], "max_new_tokens": 12, "repetition_penalty": 0.6, "logit_bias": {"80": 0.5}}
{"id": "s1", "prompt_tokens": [1, 5, 9], "max_new_tokens": 10, "temperature": 1.3, "seed": 7, "top_k": 8, "min_p": 0.05, "top_p": 0.9, "presence_penalty": 0.5, "repetition_penalty": 1.2, "logit_bias": {"10": 3}}
{"id": "s2", "prompt_tokens": [1, 66], "max_new_tokens": 10, "temperature": 0.9, "seed": 11, "min_p": 0.2, "frequency_penalty": -0.5}
{"id": "k1", "prompt_tokens": [1, 66], "max_new_tokens": 10, "temperature": 1.0, "seed": 3, "top_k": 1}
{"id": "k1g", "prompt_tokens": [1, 66], "max_new_tokens": 10}
{"id": "n", "prompt_tokens": [1, 2, 3], "max_new_tokens": 6, "temperature": 0.8, "seed": 5, "top_k": 0, "min_p": 0, "presence_penalty": 0, "repetition_penalty": 1, "logit_bias": {}}
J
"$MOERUN" infer --model m --input R --output all.jsonl --logits-out all.logits --quiet
"$PY" - R all.jsonl all.logits <<'PY'
import json, sys
import numpy as np
reqs = {j["id"]: j for j in map(json.loads, open(sys.argv[1]))}
out = {j["id"]: j for j in map(json.loads, open(sys.argv[2]))}
rows = {}
for j in map(json.loads, open(sys.argv[3])):
    rows.setdefault(j["id"], []).append(np.array(j["logits"], np.float32))
bad = []
for rid in ("g1", "g2", "g3"):
    q, toks = reqs[rid], out[rid]["output_tokens"]
    for i, t in enumerate(toks):
        l = rows[rid][i].copy()
        for k, b in q.get("logit_bias", {}).items():
            l[int(k)] += np.float32(b)
        rp = np.float32(q.get("repetition_penalty", 1.0))
        for s in set(q["prompt_tokens"]) | set(toks[:i]):
            l[s] = l[s] / rp if l[s] > 0 else l[s] * rp
        for s in set(toks[:i]):
            l[s] -= np.float32(q.get("frequency_penalty", 0) * toks[:i].count(s) + q.get("presence_penalty", 0))
        if int(np.argmax(l)) != t:
            bad.append(f"{rid} step {i}: moerun {t}, reference {int(np.argmax(l))}")
print("\n".join(bad) or "greedy with penalties and bias: every step is the reference's argmax")
sys.exit(1 if bad else 0)
PY
check "greedy with penalties and logit_bias: each token the argmax of the independently adjusted logits" test $? -eq 0
tok() { "$PY" -c "import json,sys; print({j['id']: j['output_tokens'] for j in map(json.loads, open('$1'))}['$2'])"; }
check "top_k 1 at temperature 1 is greedy ($(tok all.jsonl k1))" bash -c "[ '$(tok all.jsonl k1)' = '$(tok all.jsonl k1g)' ]"
check "penalties and bias change what greedy picks (g2 differs from its plain run)" bash -c "
  echo '{\"id\": \"g2\", \"prompt_tokens\": [1, 44, 45], \"max_new_tokens\": 12}' > P && '$MOERUN' infer --model m --input P --output p.jsonl --quiet &&
  [ \"\$('$PY' -c \"import json; print(json.load(open('p.jsonl'))['output_tokens'])\")\" != '$(tok all.jsonl g2)' ]"
# The same requests one at a time, and at np 3: the same tokens.
grep '"id": "s1"' R > S1
"$MOERUN" infer --model m --input S1 --output alone.jsonl --quiet
check "s1 alone: the tokens it had in a batch of 8" bash -c "[ '$(tok alone.jsonl s1)' = '$(tok all.jsonl s1)' ]"
$MPI -np 3 "$MOERUN" infer --model m --input R --output np3.jsonl --quiet
check "np 3: every request's tokens as in one process" cmp -s np3.jsonl all.jsonl
# Neutral fields: the plain request's bytes.
echo '{"id": "n", "prompt_tokens": [1, 2, 3], "max_new_tokens": 6, "temperature": 0.8, "seed": 5}' > N
"$MOERUN" infer --model m --input N --output plain.jsonl --quiet
check "neutral fields: the tokens of the request without them" bash -c "[ '$(tok plain.jsonl n)' = '$(tok all.jsonl n)' ]"
finish

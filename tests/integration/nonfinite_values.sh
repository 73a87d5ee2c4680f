#!/bin/bash
# Weights that are finite but overflow float32 in use (issue 63): they pass every load check, then
# turn a token's hidden state or logits into Inf/NaN. A request that meets them ends with an error
# line naming it and the layer (one stderr line each), the other requests keep their results, the
# run writes its whole output and exits 3; --resume of a killed run gives the same output (a
# journal line moerun writes is one it reads back); perplexity exits 3 naming the window instead
# of printing nan. Models: top-1 routing, so that one overflowing expert is met by some requests only.
source "$(dirname "$0")/common.sh"
cd "$WORK"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
"$MOERUN" synth --out m --layers 2 --experts 8 --top-k 1 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 96 \
  --vocab 200 --max-position 256 --eos 199 --shards 2 --seed 11 --quiet
for i in 0 1 2 3 4 5 6 7; do
  echo "{\"id\": \"r$i\", \"prompt_tokens\": [$((i * 23 + 3))], \"max_new_tokens\": 3, \"logprobs\": 2}"
done > R
"$MOERUN" infer --model m --input R --output clean.jsonl --quiet

# Layer 1's expert 0 (w2 of 3e38): the tokens routed to it overflow there.
cp -r m mx
"$PY" "$(dirname "$0")/overflow_weights.py" mx expert 1 0
rc=0
"$MOERUN" infer --model mx --input R --output o.jsonl --quiet 2> err || rc=$?
failed=$(grep -c '"error"' o.jsonl || true)
check "an overflowing expert: exit 3, the whole output written ($(wc -l < o.jsonl) lines, $failed errors; $(tail -1 err))" \
  bash -c "[ $rc -eq 3 ] && [ \$(wc -l < o.jsonl) -eq 8 ] && [ $failed -ge 1 ] && [ $failed -le 7 ]"
check "the error lines name layer 1" bash -c "[ \$(grep -c 'non-finite values (NaN or Inf) from layer 1 ' o.jsonl) -eq $failed ]"
check "one stderr line per failed request, naming it, and one closing line" \
  bash -c "[ \$(grep -c '^moerun warn: request r[0-7]: non-finite values' err) -eq $failed ] && [ \$(wc -l < err) -eq $((failed + 1)) ] && grep -q 'request(s) ended with non-finite values' err"
# The requests that never met the expert: the clean model's lines, byte for byte.
"$PY" - clean.jsonl o.jsonl <<'PY'
import json, sys
clean = {json.loads(l)["id"]: l for l in open(sys.argv[1])}
got = [json.loads(l) for l in open(sys.argv[2])]
ok = [r for r in got if "error" not in r]
same = all(json.dumps(r, sort_keys=True) == json.dumps(json.loads(clean[r["id"]]), sort_keys=True) for r in ok)
sys.exit(0 if ok and same else 1)
PY
check "the other requests keep the clean model's results" test $? -eq 0
check "no NaN or null log-prob in any result" bash -c "! grep -v '\"error\"' o.jsonl | grep -qE 'NaN|null'"

# Killed and resumed: the journal's error lines read back; the same output.
kill_after_journal k.jsonl 4 "$MOERUN" infer --model mx --input R --output k.jsonl --quiet 2> /dev/null
rc=0
"$MOERUN" infer --model mx --input R --output k.jsonl --resume --quiet 2> err || rc=$?
check "--resume after a kill: exit 3, the same output ($(tail -1 err))" bash -c "[ $rc -eq 3 ] && cmp -s k.jsonl o.jsonl"
rc=0
$MPI -np 3 "$MOERUN" infer --model mx --input R --output np3.jsonl --quiet 2> err || rc=$?
check "np 3: exit 3, the same output" bash -c "[ $rc -eq 3 ] && cmp -s np3.jsonl o.jsonl"

# The probe's case: lm_head rows of 3e38, with log-probs. Every request meets it: each line says the LM head.
cp -r m mh
"$PY" "$(dirname "$0")/overflow_weights.py" mh lm_head 7
rc=0
"$MOERUN" infer --model mh --input R --output h.jsonl --quiet 2> err || rc=$?
check "lm_head rows of 3e38: exit 3, every line an error naming the LM head (exit $rc)" \
  bash -c "[ $rc -eq 3 ] && [ \$(grep -c 'from the LM head' h.jsonl) -eq 8 ]"
echo "[1, 5, 9, 13, 17, 21, 25, 29, 33, 37]" > toks.json
rc=0
"$MOERUN" perplexity --model mh --tokens toks.json --context 5 --quiet > pp.out 2> err || rc=$?
check "perplexity over them: exit 3, one line naming the window and the LM head, no nan ($(cat err))" \
  bash -c "[ $rc -eq 3 ] && [ \$(wc -l < err) -eq 1 ] && grep -q 'window 0 .*from the LM head' err && ! grep -qi nan pp.out"
finish

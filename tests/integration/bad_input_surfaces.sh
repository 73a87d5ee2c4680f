#!/bin/bash
# Bad input on the newer surfaces (issue 46): nested JSON, a file-size limit, NaN in a saved base
# run, synth and placement options, null and conflicting scoring fields, duplicate keys, wrong
# kinds of input files. Each case: one line naming the file or option, the documented exit code,
# and nothing left behind (no output, no temp file, no journal or lock).
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$MOERUN" synth --out m1 --layers 2 --experts 4 --top-k 2 --hidden 64 --intermediate 64 --heads 4 --kv-heads 2 --head-dim 16 \
  --vocab 128 --max-position 64 --seed 1 --quiet

# expect NAME CODE PATTERN -- moerun args...: nothing named out* may exist afterwards
expect() {
  local name=$1 code=$2 pattern=$3; shift 4
  rm -rf out* fam
  set +e
  "$MOERUN" "$@" 2> err > /dev/null
  local rc=$?
  set -e
  local lines left
  lines=$(wc -l < err)
  left=$(ls -d out* fam 2>/dev/null | tr '\n' ' ' || true)
  if [ "$rc" -eq "$code" ] && grep -q -- "$pattern" err && [ "$lines" -eq 1 ] && [ -z "$left" ]; then
    ok "$name (exit $rc: $(head -c 200 err))"
  else
    bad "$name: exit $rc (want $code), $lines line(s), left: [$left]: $(head -c 400 err)"
  fi
}

# 1. Nesting: 100,000 levels crashed the tokens reader (a recursive dump); 1,000 printed 60 KB.
"$PY" -c "print('['*100000+']'*100000)" > deep.json
"$PY" -c "print('['*1000+']'*1000)" > deep1k.json
"$PY" -c "print('[1, \"' + 'x'*60000 + '\"]')" > longel.json
expect "perplexity --tokens nested 100,000 deep" 3 "deep.json: not valid JSON: nested deeper than 64 levels at byte 64" -- \
  perplexity --model m1 --tokens deep.json --context 16 --json out.json --quiet
expect "perplexity --tokens nested 1,000 deep" 3 "deep1k.json: not valid JSON: nested deeper than 64" -- \
  perplexity --model m1 --tokens deep1k.json --context 16 --json out.json --quiet
expect "perplexity --tokens with a 60 KB element quotes 40 characters" 3 'longel.json: element 1 is "x\{36\}\.\.\., not a token id' -- \
  perplexity --model m1 --tokens longel.json --context 16 --json out.json --quiet
check "... and the line is short" [ "$(wc -c < err)" -lt 200 ]
printf '{"id": "a", "prompt_tokens": %s1%s}\n' "$("$PY" -c "print('['*5000)")" "$("$PY" -c "print(']'*5000)")" > deep.jsonl
expect "a request line nested 5,000 deep" 3 "deep.jsonl: line 1: not valid JSON: nested deeper than 64" -- \
  infer --model m1 --input deep.jsonl --output out.jsonl --quiet

# 3. A file-size limit: SIGXFSZ is ignored, so the write fails with EFBIG (exit 4), no partial file.
# PMIx keeps its store in files that the limit would hit first (docs/NOTES.md).
"$PY" -c "print([i % 128 for i in range(12000)])" > toks12k.json
set +e
(ulimit -f 1000; PMIX_MCA_gds=hash exec "$MOERUN" perplexity --model m1 --tokens toks12k.json --context 16 --save-logits out.h5 --quiet) 2> err
rc=$?
set -e
check "perplexity --save-logits past ulimit -f: exit 4 naming the file (got $rc: $(head -c 200 err))" \
  bash -c "[ $rc -eq 4 ] && grep -q 'out.h5: writing failed' err && [ \$(wc -l < err) -eq 1 ]"
check "... and no out.h5 nor out.h5.tmp.* left" bash -c "! ls out.h5* 2>/dev/null | grep -q ."

# 4. A saved base run with a NaN log-prob: exit 3 naming the file, the row and the column.
"$PY" -c "import random; random.seed(1); print([random.randrange(128) for _ in range(200)])" > toks.json
"$MOERUN" perplexity --model m1 --tokens toks.json --context 16 --save-logits base.h5 --quiet
"$PY" -c "
import h5py, numpy as np, shutil
for name, v in (('nan.h5', np.nan), ('inf.h5', -np.inf)):
    shutil.copy('base.h5', name)
    with h5py.File(name, 'r+') as f:
        r = f['logprobs'][3]; r[5] = v; f['logprobs'][3] = r
"
expect "--kl-base with a NaN log-prob" 3 "nan.h5: /logprobs\[3,5\] is NaN" -- \
  perplexity --model m1 --tokens toks.json --context 16 --kl-base nan.h5 --json out.json --quiet
expect "--kl-base with an Inf log-prob" 3 "inf.h5: /logprobs\[3,5\] is Inf" -- \
  perplexity --model m1 --tokens toks.json --context 16 --kl-base inf.h5 --json out.json --quiet

# 5. synth options out of range: refused naming the option, nothing written.
synth() { echo synth --out fam --layers 2 --experts 4 --hidden 64 --intermediate 64 --heads 4 --kv-heads 2 --head-dim 16 --vocab 128 --quiet; }
expect "synth --sliding-window -1" 2 "--sliding-window must be >= 1, not -1" -- $(synth) --family gpt_oss --sliding-window -1
expect "synth --rope-factor 0 (gpt_oss)" 2 "--rope-factor must be a finite number > 0, not 0" -- $(synth) --family gpt_oss --rope-factor 0
expect "synth --rope-factor -1 (yarn)" 2 "--rope-factor must be a finite number > 0, not -1" -- \
  $(synth) --rope-type yarn --rope-factor -1 --rope-original-max-position 512
expect "synth --rope-factor -2 without an original max position" 2 "--rope-factor must be a finite number > 0, not -2" -- \
  $(synth) --rope-type yarn --rope-factor -2
expect "synth --rope-factor 0.5 (linear)" 2 "--rope-factor must be >= 1 with --rope-type linear" -- $(synth) --rope-type linear --rope-factor 0.5
expect "synth --rope-original-max-position 0" 2 "--rope-original-max-position must be >= 1" -- \
  $(synth) --rope-type yarn --rope-factor 4 --rope-original-max-position 0
expect "synth --shared-intermediate -5" 2 "--shared-intermediate must be >= 0" -- $(synth) --family qwen2_moe --shared-intermediate -5
expect "synth --gate-skew nan" 2 "--gate-skew must be in \[0, 100\], not nan" -- $(synth) --gate-skew nan

# 6. placement plan: --groups must divide the experts; a capped --redundant says why.
printf '%s\n' '{"id": "a", "prompt_tokens": [1, 5, 7], "max_new_tokens": 4}' > one.jsonl
"$MOERUN" infer --model m1 --input one.jsonl --output o.jsonl --trace t.h5 --quiet
for g in 3 5; do
  expect "placement plan --groups $g with 4 experts" 2 "--groups $g does not divide the 4 experts of a layer" -- \
    placement plan --trace t.h5 --nodes 1 --ranks-per-node 3 --groups $g --out out.json
done
"$MOERUN" placement plan --trace t.h5 --nodes 1 --ranks-per-node 3 --redundant 1000000000 --out p.json > plan.txt
check "placement plan --redundant 10^9: capped at 4 saying why, not blaming --device-bytes" \
  bash -c "grep -q '4 extra slots per layer' plan.txt && grep -q 'beyond 4 every expert rank would hold a copy of every expert' plan.txt && ! grep -q device-bytes plan.txt"

# 7. Scoring fields: null and echo with prompt_logprobs are refused (docs/FORMATS.md).
for f in logprobs prompt_logprobs; do
  printf '{"id": "a", "prompt_tokens": [1, 2], "%s": null}\n' $f > null.jsonl
  expect "\"$f\": null" 3 "null.jsonl: line 1: field $f is null" -- infer --model m1 --input null.jsonl --output out.jsonl --quiet
done
printf '%s\n' '{"id": "a", "prompt_tokens": [1, 2], "echo": null}' > null.jsonl
expect "\"echo\": null" 3 "null.jsonl: line 1: field echo is not true or false" -- infer --model m1 --input null.jsonl --output out.jsonl --quiet
printf '%s\n' '{"id": "a", "prompt_tokens": [1, 2], "echo": true, "logprobs": 2, "prompt_logprobs": 5}' > both.jsonl
expect "echo with prompt_logprobs" 3 "both.jsonl: line 1: fields echo and prompt_logprobs both ask" -- \
  infer --model m1 --input both.jsonl --output out.jsonl --quiet
# A duplicate layer key in a placement file: one copy used to win silently.
printf '{"0": {"0": 1, "1": 2, "2": 1, "3": 2}, "1": {"0": 1, "1": 2, "2": 1, "3": 2}, "0": {"0": 2, "1": 1, "2": 2, "3": 1}}' > dup.json
expect "placement file with a layer given twice" 3 "dup.json: not valid JSON: key \"0\" appears twice in one object" -- \
  placement show --placement dup.json --trace t.h5 --nodes 1 --ranks-per-node 3
"$PY" -c "print('{\"0\":' * 70 + '1' + '}' * 70)" > deep-placement.json
expect "placement show of a file nested 70 deep" 3 "deep-placement.json: not valid JSON: nested deeper than 64" -- \
  placement show --placement deep-placement.json --trace t.h5 --nodes 1 --ranks-per-node 3
# --placement in one process: used to be ignored without a word.
"$MOERUN" infer --model m1 --input one.jsonl --output o.jsonl --placement p.json --quiet 2> err
check "--placement in one process warns that it is not used" grep -q "placement p.json is not used: in one process every expert is local" err
# Wrong kinds of input file, one rule: missing 4, not a regular file 2 (naming the option).
mkfifo fifo
expect "--kl-base a FIFO" 2 "--kl-base fifo: is a FIFO, expected a regular file" -- \
  perplexity --model m1 --tokens toks.json --context 16 --kl-base fifo --json out.json --quiet
expect "--kl-base a directory" 2 "--kl-base m1: is a directory" -- perplexity --model m1 --tokens toks.json --context 16 --kl-base m1 --json out.json --quiet
expect "--kl-base missing" 4 "--kl-base nope.h5: cannot open" -- perplexity --model m1 --tokens toks.json --context 16 --kl-base nope.h5 --json out.json --quiet
expect "--text a directory" 2 "m1: is a directory" -- perplexity --model m1 --text m1 --context 16 --json out.json --quiet
expect "--tokens a FIFO" 2 "fifo: is a FIFO" -- perplexity --model m1 --tokens fifo --context 16 --json out.json --quiet
expect "placement --trace a FIFO" 2 "--trace fifo: is a FIFO" -- placement plan --trace fifo --nodes 1 --ranks-per-node 3 --out out.json
expect "affinity build --trace a directory" 2 "--trace m1: is a directory" -- affinity build --trace m1 --out out.h5
expect "--affinity a FIFO" 2 "--affinity fifo: is a FIFO" -- \
  infer --model m1 --input one.jsonl --output out.jsonl --l1-bytes 100K --prefetch affinity --affinity fifo --quiet
# A scoring-only run's summary: no "first token after -1 s".
printf '%s\n' '{"id": "s", "prompt_tokens": [1, 2, 3], "max_new_tokens": 0, "prompt_logprobs": 1}' > score.jsonl
"$MOERUN" infer --model m1 --input score.jsonl --output o.jsonl 2> err
check "a scoring-only run's summary says no token was generated" bash -c "grep -q 'no token generated (scoring only)' err && ! grep -q 'after -1' err"

finish

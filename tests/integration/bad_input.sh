#!/bin/bash
# Bad input: each case must fail with one clear line naming the file/field, the documented exit
# code (2 usage, 3 bad input, 4 I/O), and no output file.
source "$(dirname "$0")/common.sh"
synth_model "$WORK/m"
requests "$WORK/good.jsonl" 3 4

# expect NAME CODE PATTERN -- moerun args...
expect() {
  local name=$1 code=$2 pattern=$3; shift 4
  rm -f "$WORK/out.jsonl" "$WORK/out.jsonl.journal"
  set +e
  "$MOERUN" "$@" 2> "$WORK/err" > /dev/null
  local rc=$?
  set -e
  local lines; lines=$(wc -l < "$WORK/err")
  if [ "$rc" -eq "$code" ] && grep -q -- "$pattern" "$WORK/err" && [ "$lines" -eq 1 ] && [ ! -e "$WORK/out.jsonl" ]; then
    ok "$name (exit $rc: $(cat "$WORK/err"))"
  else
    bad "$name: exit $rc (want $code), $lines line(s), output $( [ -e "$WORK/out.jsonl" ] && echo present || echo absent ): $(cat "$WORK/err")"
  fi
}
infer() { echo infer --model "$1" --input "$2" --output "$WORK/out.jsonl" --quiet; }

expect "missing model dir" 4 "does not exist" -- $(infer "$WORK/nope" "$WORK/good.jsonl")
cp -r "$WORK/m" "$WORK/trunc" && truncate -s 2000 "$WORK/trunc/model.h5"
expect "truncated model.h5" 3 "model.h5: not a readable HDF5 file" -- $(infer "$WORK/trunc" "$WORK/good.jsonl")
cp -r "$WORK/m" "$WORK/noshard" && rm "$WORK/noshard/experts-00001.h5"
expect "shard missing experts" 3 "is in no shard" -- $(infer "$WORK/noshard" "$WORK/good.jsonl")
cp -r "$WORK/m" "$WORK/nan"
"$PY" -c "
import h5py, numpy as np
with h5py.File('$WORK/nan/experts-00001.h5', 'r+') as f:
    g = f['layers/2/experts/5']; w = g['w3'][()]; w[7, 3] = np.nan; del g['w3']
    g.create_dataset('w3', data=w, chunks=w.shape)
"
# Always scanned as experts load (--check-weights is accepted but no longer needed).
expect "NaN expert weight" 3 "experts-00001.h5: /layers/2/experts/5/w3 contains NaN at \[7,3\]" -- \
  $(infer "$WORK/nan" "$WORK/good.jsonl")
expect "NaN expert weight, loaded through the cache" 3 "experts-00001.h5: /layers/2/experts/5/w3 contains NaN at \[7,3\]" -- \
  $(infer "$WORK/nan" "$WORK/good.jsonl") --l1-bytes 200K
cp -r "$WORK/m" "$WORK/changed"
"$PY" -c "
import h5py, numpy as np
with h5py.File('$WORK/changed/experts-00001.h5', 'r+') as f:
    g = f['layers/2/experts/5']; w = g['w3'][()]; w[7, 3] += 0.5; del g['w3']
    g.create_dataset('w3', data=w, chunks=w.shape)
"
expect "changed weight bytes fail the checksum" 3 "checksum mismatch" -- $(infer "$WORK/changed" "$WORK/good.jsonl")
cp -r "$WORK/m" "$WORK/densenan"
"$PY" -c "
import h5py, numpy as np
with h5py.File('$WORK/densenan/model.h5', 'r+') as f:
    w = f['layers/1/wo'][()]; w[2, 5] = np.inf; f['layers/1/wo'][...] = w
"
expect "Inf in a dense weight (always checked)" 3 "model.h5: /layers/1/wo contains Inf at \[2,5\]" -- $(infer "$WORK/densenan" "$WORK/good.jsonl")

printf '{"id": "a", "prompt_tokens": [1, 2]}\n{"id": "b", "prompt_tokens": [1, \n' > "$WORK/broken.jsonl"
expect "broken JSONL line" 3 "broken.jsonl: line 2: not valid JSON" -- $(infer "$WORK/m" "$WORK/broken.jsonl")
echo '{"id": "a", "prompt_tokens": [1, 200]}' > "$WORK/vocab.jsonl"
expect "token id >= vocab_size" 3 "line 1: prompt_tokens\[1\] = 200 is out of range \[0, 200)" -- $(infer "$WORK/m" "$WORK/vocab.jsonl")
echo '{"id": "a", "prompt_tokens": []}' > "$WORK/empty.jsonl"
expect "empty prompt" 3 "line 1: field prompt_tokens is empty" -- $(infer "$WORK/m" "$WORK/empty.jsonl")
echo '{"id": "a", "prompt_tokens": [1], "max_new_tokens": -2}' > "$WORK/neg.jsonl"
expect "max_new_tokens < 0" 3 "line 1: field max_new_tokens is -2" -- $(infer "$WORK/m" "$WORK/neg.jsonl")
expect "missing input file" 4 "nope.jsonl: cannot open input file" -- $(infer "$WORK/m" "$WORK/nope.jsonl")
rm -f "$WORK/out.jsonl"
set +e
"$MOERUN" infer --model "$WORK/m" --input "$WORK/good.jsonl" --output /nonexistent-dir/out.jsonl --quiet 2> "$WORK/err"
rc=$?
set -e
check "unwritable output path: exit 4, names the path" bash -c "[ $rc -eq 4 ] && grep -q '/nonexistent-dir/out.jsonl' '$WORK/err' && [ \$(wc -l < '$WORK/err') -eq 1 ]"
expect "unknown option is a usage error" 2 "unrecognised option\|unrecognized option" -- infer --model "$WORK/m" --bogus 1
expect "bad overflow policy is a usage error" 2 "--overflow must be reroute or drop" -- $(infer "$WORK/m" "$WORK/good.jsonl") --overflow spill

# --skip-invalid turns bad lines into results carrying an error field.
printf '{"id": "a", "prompt_tokens": [1, 2], "max_new_tokens": 2}\nnot json\n' > "$WORK/mixed.jsonl"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/mixed.jsonl" --output "$WORK/mixed.out" --quiet --skip-invalid
check "--skip-invalid reports the bad line as a result with an error" \
  bash -c "[ \$(wc -l < '$WORK/mixed.out') -eq 2 ] && sed -n 2p '$WORK/mixed.out' | grep -q '\"error\":\"line 2: not valid JSON'"
finish

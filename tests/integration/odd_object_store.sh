#!/bin/bash
# The object store misbehaving (issue 21): a small local S3 server (odd_s3_server.py, on 127.0.0.1)
# that breaks one rule at a time. Every read of a remote model goes through moerun's own client,
# HDF5's included, so each case ends with its documented exit code, one line naming the s3:// URL,
# and no crash or hang: a server that ignores Range, one that stalls (--s3-timeout), transient 500s
# and cut bodies (retried, the run succeeds), a listing that never ends, corrupt metadata served
# from the store (the HDF5 probe walks it too), and option values that cannot work.
source "$(dirname "$0")/common.sh"
SERVER="$(dirname "$0")/odd_s3_server.py"
synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 6 4
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet
mkdir -p "$WORK/root/bkt" && cp -r "$WORK/m" "$WORK/root/bkt/m"
# model.h5 metadata that crashes libhdf5 (bad_model.sh's mutation of the same small model)
"$MOERUN" synth --out "$WORK/root/bkt/segv" --layers 2 --experts 4 --top-k 2 --hidden 32 --heads 2 --kv-heads 1 --head-dim 16 \
  --intermediate 48 --vocab 64 --max-position 64 --shards 2 --seed 3 --quiet
"$PY" - "$WORK/root/bkt/segv/model.h5" 2127 80808080 12253 5aff <<'PY'
import sys
p = sys.argv[1]; d = bytearray(open(p, 'rb').read())
for off, hx in zip(sys.argv[2::2], sys.argv[3::2]):
    b = bytes.fromhex(hx); d[int(off):int(off) + len(b)] = b
open(p, 'wb').write(d)
PY
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test-secret AWS_REGION=us-east-1
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$WORK"' EXIT
serve() {  # serve MODE [server options]: starts a server, sets AWS_ENDPOINT_URL
  rm -f "$WORK/port"
  "$PY" "$SERVER" --root "$WORK/root" --port-file "$WORK/port" --mode "$@" &
  pids+=($!)
  for _ in $(seq 1 200); do [ -s "$WORK/port" ] && break; sleep 0.05; done
  export AWS_ENDPOINT_URL="http://127.0.0.1:$(cat "$WORK/port")"
}
# run NAME EXPECTED_RC PATTERN MAX_SECONDS -- ARGS...: exit code, one error line matching, in time, no output
run() {
  local name=$1 want=$2 pattern=$3 limit=$4; shift 5
  rm -f "$WORK/out.jsonl"
  local start rc=0; start=$(date +%s%N)
  timeout 120 "$MOERUN" "$@" > "$WORK/run.out" 2> "$WORK/run.err" || rc=$?
  local took=$(( ($(date +%s%N) - start) / 1000000000 ))
  local errs; errs=$(grep -c '^moerun: error' "$WORK/run.err" || true)
  check "$name: exit $rc (want $want) in ${took}s, one line: $(grep -m1 '^moerun: error' "$WORK/run.err")" \
    bash -c "[ $rc -eq $want ] && [ $errs -eq 1 ] && grep -q -- \"$pattern\" '$WORK/run.err' && \
             [ $took -lt $limit ] && [ ! -e '$WORK/out.jsonl' ]"
}
infer=(infer --input "$WORK/reqs.jsonl" --output "$WORK/out.jsonl" --quiet)

serve normal
rc=0; "$MOERUN" "${infer[@]}" --model s3://bkt/m --stats-json "$WORK/normal.stats" || rc=$?
check "a well-behaved server: exit $rc, the local model's tokens" bash -c "[ $rc -eq 0 ] && cmp -s '$WORK/ref.jsonl' '$WORK/out.jsonl'"
run "metadata that crashes libhdf5, from the store: the probe names it" 3 \
  "s3://bkt/segv/model.h5: corrupt HDF5 metadata (reading it crashed libhdf5" 30 -- "${infer[@]}" --model s3://bkt/segv
run "inspect on it" 3 "s3://bkt/segv/model.h5: corrupt HDF5 metadata (reading it crashed" 30 -- inspect --model s3://bkt/segv
run "--s3-timeout below a millisecond" 2 "--s3-timeout must be a number of seconds >= 0.001" 10 -- \
  "${infer[@]}" --model s3://bkt/m --s3-timeout 0.0004
run "an empty path segment" 2 "s3://bkt//m: empty" 10 -- "${infer[@]}" --model s3://bkt//m

serve ignore-range
run "a server that answers ranged GETs with the whole object" 4 "s3://bkt/m/.*the server" 30 -- \
  "${infer[@]}" --model s3://bkt/m --s3-retries 1
MOERUN_HDF5_PROBE=0 run "... without the probe (the command's own reads)" 4 "s3://bkt/m/.*the server" 30 -- \
  "${infer[@]}" --model s3://bkt/m --s3-retries 1

serve stall --after 3 --stall-s 60
run "a server that stalls: --s3-timeout bounds every read" 4 "s3://bkt/m/.*unreachable after 2 attempts (last: Timeout" 30 -- \
  "${infer[@]}" --model s3://bkt/m --s3-timeout 1 --s3-retries 1
MOERUN_HDF5_PROBE=0 run "... without the probe" 4 "s3://bkt/m/.*unreachable after 2 attempts (last: Timeout" 30 -- \
  "${infer[@]}" --model s3://bkt/m --s3-timeout 1 --s3-retries 1

serve flaky
rc=0; "$MOERUN" "${infer[@]}" --model s3://bkt/m --stats-json "$WORK/flaky.stats" 2> "$WORK/flaky.err" || rc=$?
check "500s and cut bodies on every other request: retried, exit $rc, the same tokens" bash -c \
  "[ $rc -eq 0 ] && cmp -s '$WORK/ref.jsonl' '$WORK/out.jsonl' && grep -q 'retry 1/5' '$WORK/flaky.err' &&
   '$PY' -c 'import json,sys; o=json.load(open(sys.argv[1]))[\"object_store\"]; assert o[\"retries\"] > 0, o' '$WORK/flaky.stats'"
run "... and with no retries allowed: exit 4 naming the store" 4 "s3://bkt/m/.*unreachable after 1 attempts" 30 -- \
  "${infer[@]}" --model s3://bkt/m --s3-retries 0

serve list-loop
run "a listing that never ends" 4 "s3://bkt/m: the object store's listing repeats its continuation token" 30 -- \
  "${infer[@]}" --model s3://bkt/m
serve list-notoken
run "a listing truncated without a continuation token" 4 "s3://bkt/m: the object store's listing says it is truncated but gives no" 30 -- \
  "${infer[@]}" --model s3://bkt/m
finish

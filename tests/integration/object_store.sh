#!/bin/bash
# The L3 object-store tier against a real S3 server: cluster/objectstore/start.sh brings up Swift
# with s3api and SigV4 on loopback and uploads a synthetic model. Then:
#   - the client tests (test_object_store: listings, ranged reads, round trips against reads through HDF5, errors);
#   - `infer --model s3://…` gives the same tokens as the local model (one process, and np 3 with a
#     small L1 so experts stream from the store during the run); with an L2 directory a second run
#     reads no expert from the store;
#   - a wrong secret fails with exit 4 and an access-denied message that does not print the secret;
#   - the server stopped mid-run: retries, then exit 4 naming the store, no output file;
#   - the server stopped and back within the retry budget: the run finishes with the same tokens.
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
export MOERUN_OBJECTSTORE_DIR=$WORK/objectstore MOERUN_S3_PORT=${MOERUN_S3_PORT:-18089}
trap '"$ROOT/cluster/objectstore/stop.sh" > /dev/null 2>&1; rm -rf "$WORK"' EXIT

synth_model "$WORK/m"   # 3 layers x 8 experts, 2 shards; one expert = 73728 bytes stored
STORED=73728                          # one expert as stored: 3 x 64 x 96 x 4 bytes
EXPERT=$(expert_slot_bytes "$WORK/m")   # one L1 slot (packed, padding included)
requests "$WORK/reqs.jsonl" 12 12
requests "$WORK/long.jsonl" 24 24   # long enough (several seconds at np 3) to lose the server in the middle
"$MOERUN" infer --model "$WORK/m" --input "$WORK/long.jsonl" --output "$WORK/long-ref.jsonl" --quiet
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet

# A relative model directory, as in the README's example.
eval "$(cd "$WORK" && "$ROOT/cluster/objectstore/start.sh" --bucket moerun-test --upload m models/tiny)"
code=$(curl -s -o /dev/null -w '%{http_code}' "$AWS_ENDPOINT_URL/moerun-test/models/tiny/model.h5")
check "the object store is up and refuses an unsigned request (HTTP $code)" test "${code:0:1}" = 4
URL=s3://moerun-test/models/tiny

status=0
MOERUN_S3_MODEL=$URL MOERUN_S3_LOCAL_MODEL=$WORK/m MOERUN_OBJECTSTORE_LOG=$MOERUN_OBJECTSTORE_DIR/log/proxy.log \
  "${MOERUN_OBJECT_STORE_TEST_BIN:?}" > "$WORK/client.txt" 2>&1 || status=$?
check "client tests against the real server" test $status -eq 0
grep -E "^one expert|FAILED|Failure" "$WORK/client.txt" || true

# convert --out s3://: a Hugging Face checkpoint straight into the store, then inferred from there
# like its local conversion; a rerun uploads nothing (every object there with its xxh64).
"$PY" "$(dirname "$0")/make_hf_checkpoint.py" "$WORK/hf" > /dev/null
"$MOERUN" convert --from-hf "$WORK/hf" --out "$WORK/hf-local" --shards 2 --quiet
"$MOERUN" convert --from-hf "$WORK/hf" --out s3://moerun-test/models/converted --shards 2 2> "$WORK/conv.err"
check "convert --out s3:// uploads the model ($(grep -o '[0-9]* object(s) uploaded' "$WORK/conv.err"))" grep -q '3 object(s) uploaded' "$WORK/conv.err"
echo '{"id": "a", "prompt_tokens": [1, 7, 9], "max_new_tokens": 4}' > "$WORK/conv.jsonl"
"$MOERUN" infer --model "$WORK/hf-local" --input "$WORK/conv.jsonl" --output "$WORK/conv-local.jsonl" --quiet
"$MOERUN" infer --model s3://moerun-test/models/converted --input "$WORK/conv.jsonl" --output "$WORK/conv-s3.jsonl" --quiet
check "the uploaded conversion infers like the local one" cmp -s "$WORK/conv-local.jsonl" "$WORK/conv-s3.jsonl"
"$MOERUN" convert --from-hf "$WORK/hf" --out s3://moerun-test/models/converted --shards 2 2> "$WORK/conv2.err"
check "a second convert to the same prefix uploads nothing" grep -q '0 object(s) uploaded .* 3 already there' "$WORK/conv2.err"
check "the staging directory is gone" bash -c "! ls -d \${TMPDIR:-/tmp}/moerun-convert-* 2>/dev/null | grep -q ."
# int4 experts (issue 64) from the store: its three parts a matrix by ranged GETs, streamed through a
# one-expert L1 at np 3, give the local int4 conversion's tokens.
"$MOERUN" convert --from-hf "$WORK/hf" --out "$WORK/hf-int4" --quantize int4 --shards 2 --quiet
"$MOERUN" convert --from-hf "$WORK/hf" --out s3://moerun-test/models/int4 --quantize int4 --shards 2 --quiet
"$MOERUN" infer --model "$WORK/hf-int4" --input "$WORK/reqs.jsonl" --output "$WORK/int4-local.jsonl" --quiet
$MPI -np 3 "$MOERUN" infer --model s3://moerun-test/models/int4 --input "$WORK/reqs.jsonl" --output "$WORK/int4-s3.jsonl" --quiet \
  --l1-bytes "$(expert_slot_bytes "$WORK/hf-int4")" --stats-json "$WORK/int4-s3.stats"
check "int4 experts from s3:// at np 3 with a one-expert L1: the local int4 model's tokens" bash -c \
  "cmp -s '$WORK/int4-local.jsonl' '$WORK/int4-s3.jsonl' && '$PY' -c 'import json,sys; c=json.load(open(sys.argv[1]))[\"cache\"]; assert c[\"l3_reads\"] > 0, c' '$WORK/int4-s3.stats'"

check "inspect --model s3://" bash -c "'$MOERUN' inspect --model $URL | grep -q 'num_experts 8'"

"$MOERUN" infer --model $URL --input "$WORK/reqs.jsonl" --output "$WORK/s3.jsonl" --stats-json "$WORK/s3.stats" 2> "$WORK/s3.err"
check "one process, --model s3://: same tokens as the local model" cmp -s "$WORK/ref.jsonl" "$WORK/s3.jsonl"
check "the summary and --stats-json count object-store requests" bash -c \
  "grep -q 'object store: .* requests, 0 retries' '$WORK/s3.err' &&
   '$PY' -c 'import json,sys; o=json.load(open(sys.argv[1]))[\"object_store\"]; assert o[\"requests\"] >= 24 and o[\"bytes\"] >= 24*$STORED, o' '$WORK/s3.stats'"

# np 3: 1 router, 2 expert ranks with 12 experts each; L1 holds 3 (25%), no L2: experts stream from
# the store throughout the run.
$MPI -np 3 "$MOERUN" infer --model $URL --input "$WORK/reqs.jsonl" --output "$WORK/s3-np3.jsonl" --quiet \
  --l1-bytes $((3 * EXPERT)) --prefetch lru --stats-json "$WORK/s3-np3.stats"
check "np 3, L1 = 25%, --model s3://: same tokens as the local model" cmp -s "$WORK/ref.jsonl" "$WORK/s3-np3.jsonl"

# The tiers together: a first run fills L2 from the store, a second run on the same --l2-dir reads
# no expert from the store: what it asks of the store is only the start-up (HEADs, the listing,
# model.h5 and the shards' metadata), the cold run's start-up plus every expert it read.
for run in cold warm; do
  "$MOERUN" infer --model $URL --input "$WORK/reqs.jsonl" --output "$WORK/l2-$run.jsonl" --quiet \
    --l1-bytes $((6 * EXPERT)) --l2-dir "$WORK/l2" --stats-json "$WORK/l2-$run.stats"
done
check "s3:// with L2: the second run reads every expert from L2, none from the store, same tokens" "$PY" - \
  "$WORK/l2-cold.stats" "$WORK/l2-warm.stats" "$WORK/ref.jsonl" "$WORK/l2-warm.jsonl" <<'PY'
import json, sys
cold, warm = (json.load(open(f)) for f in sys.argv[1:3])
assert cold["cache"]["l3_reads"] >= 24 and warm["cache"]["l3_reads"] == 0, (cold["cache"], warm["cache"])
assert warm["cache"]["l2_hits"] > 0
assert cold["object_store"]["bytes"] - warm["object_store"]["bytes"] >= 0.99 * cold["cache"]["l3_bytes_read"], (cold, warm)
assert cold["object_store"]["requests"] - warm["object_store"]["requests"] >= cold["cache"]["l3_reads"], (cold, warm)
assert open(sys.argv[3]).read() == open(sys.argv[4]).read()
PY

status=0
AWS_SECRET_ACCESS_KEY=not-the-secret-q7 "$MOERUN" infer --model $URL --input "$WORK/reqs.jsonl" \
  --output "$WORK/bad.jsonl" > "$WORK/bad.err" 2>&1 || status=$?
check "wrong secret: exit 4" test $status -eq 4
check "wrong secret: one clear line naming the object and the cause" \
  grep -q "access denied by the object store (HTTP 403 SignatureDoesNotMatch)" "$WORK/bad.err"
check "wrong secret: the secret is not printed, no output" bash -c \
  "! grep -q not-the-secret-q7 '$WORK/bad.err' && [ ! -e '$WORK/bad.jsonl' ]"

status=0
env -u AWS_SECRET_ACCESS_KEY "$MOERUN" infer --model $URL --input "$WORK/reqs.jsonl" --output "$WORK/nocred.jsonl" \
  > "$WORK/nocred.err" 2>&1 || status=$?
check "no credentials: exit 2 naming the variables" bash -c \
  "[ $status -eq 2 ] && grep -q 'set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY' '$WORK/nocred.err'"
status=0
"$MOERUN" infer --model s3://Bad_Bucket/x --input "$WORK/reqs.jsonl" --output "$WORK/badurl.jsonl" > "$WORK/badurl.err" 2>&1 || status=$?
check "malformed s3:// URL: exit 2 naming the bucket" bash -c "[ $status -eq 2 ] && grep -q 'bucket name \"Bad_Bucket\"' '$WORK/badurl.err'"

status=0
AWS_ENDPOINT_URL=http://127.0.0.1:9 "$MOERUN" infer --model $URL --input "$WORK/reqs.jsonl" --output "$WORK/unr.jsonl" \
  --s3-retries 2 > "$WORK/unr.err" 2>&1 || status=$?
check "unreachable store: exit 4 after 3 attempts" bash -c \
  "[ $status -eq 4 ] && grep -q 'unreachable after 3 attempts' '$WORK/unr.err' && [ \$(grep -c 'retry [12]/2' '$WORK/unr.err') -eq 2 ]"

# The server goes away in the middle of a run (after set-up: the model line is printed once the
# weights are loaded and the shards indexed).
run_with_outage() {  # run_with_outage NAME RETRIES DOWN_SECONDS(-1: stays down)
  local name=$1 retries=$2 down=$3
  $MPI -np 3 "$MOERUN" infer --model $URL --input "$WORK/long.jsonl" --output "$WORK/$name.jsonl" \
    --l1-bytes $((2 * EXPERT)) --prefetch off --s3-retries "$retries" > "$WORK/$name.err" 2>&1 < /dev/null &
  local pid=$!
  for _ in $(seq 1 300); do grep -q "info: model s3://" "$WORK/$name.err" 2> /dev/null && break; sleep 0.05; done
  "$ROOT/cluster/objectstore/proxy.sh" stop
  if [ "$down" -ge 0 ]; then sleep "$down"; "$ROOT/cluster/objectstore/proxy.sh" start; fi
  status=0
  wait $pid || status=$?
  [ "$down" -ge 0 ] || "$ROOT/cluster/objectstore/proxy.sh" start
}
run_with_outage outage-down 3 -1
check "server stopped mid-run: retries logged" grep -q "retry 1/3" "$WORK/outage-down.err"
grep "error" "$WORK/outage-down.err" | head -3
check "server stopped mid-run: exit 4, the store named, no output" bash -c \
  "[ $status -eq 4 ] && grep -q 'unreachable after 4 attempts' '$WORK/outage-down.err' && [ ! -e '$WORK/outage-down.jsonl' ]"
run_with_outage outage-back 8 2
check "server back within the retry budget: the run finishes" test $status -eq 0
check "server back within the retry budget: retries logged, same tokens" bash -c \
  "grep -q 'retry 1/8' '$WORK/outage-back.err' && cmp -s '$WORK/long-ref.jsonl' '$WORK/outage-back.jsonl'"
finish

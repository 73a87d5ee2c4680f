#!/bin/bash
# Prefix cache (--prefix-cache-mb): requests that share a prompt prefix reuse its K/V and routing.
# Outputs equal a run without the cache (one process and mpirun -np 3), the skipped prompt tokens
# are exactly the block-aligned prefixes shared with an earlier request, a prefix at other positions
# is not reused, and a budget too small for one block changes nothing. With two routers, requests
# that share a first block go to one router (in fair-sized pieces), so prefixes are still reused.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
synth_model "$WORK/m"
"$PY" - "$WORK/reqs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(5)
system = [1] + [rng.randrange(2, 199) for _ in range(36)]   # a 37-token shared "system prompt"
reqs = []
for i in range(6):                                           # system prompt + a question each
    reqs.append(system + [rng.randrange(2, 199) for _ in range(rng.randrange(1, 12))])
reqs.append(list(system))                                    # exactly the system prompt
reqs.append([7] + system)                                    # the same tokens one position later
reqs.append(system[:10] + [5, 6, 7] + system[13:])           # shares the first block only
reqs.append([rng.randrange(2, 199) for _ in range(20)])      # nothing shared
with open(sys.argv[1], "w") as f:
    for i, p in enumerate(reqs):
        f.write(json.dumps({"id": f"q{i}", "prompt_tokens": p, "max_new_tokens": 6}) + "\n")
PY
B=8
run() { "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --quiet "$@"; }
run --output "$WORK/plain.jsonl" --stats-json "$WORK/plain.json" --logits-out "$WORK/plain.logits"
run --output "$WORK/cached.jsonl" --stats-json "$WORK/cached.json" --prefix-cache-mb 16 --prefix-cache-block $B \
  --logits-out "$WORK/cached.logits"
check "prefix cache: the same output as without it" cmp -s "$WORK/plain.jsonl" "$WORK/cached.jsonl"
check "prefix cache: skipped prompt tokens are the shared block-aligned prefixes, nothing else" \
  "$PY" - "$WORK/reqs.jsonl" "$WORK/plain.json" "$WORK/cached.json" "$WORK/plain.logits" "$WORK/cached.logits" $B <<'PY'
import json, sys
import numpy as np
reqs = [json.loads(l)["prompt_tokens"] for l in open(sys.argv[1])]
plain, cached = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
B = int(sys.argv[6])
want = 0
for i, p in enumerate(reqs):
    shared = 0
    for q in reqs[:i]:
        n = 0
        while n < min(len(p), len(q)) and p[n] == q[n]:
            n += 1
        shared = max(shared, n)
    want += min(shared, len(p) - 1) // B * B
pc = cached["prefix_cache"]
assert want > 0 and pc["skipped_prefill_tokens"] == want, (pc, want)
assert pc["hits"] == 7 and pc["lookups"] == len(reqs), pc   # 5 system prompt + question, the system prompt alone, the one sharing a block
assert cached["tokens"] == plain["tokens"] - want, (cached["tokens"], plain["tokens"], want)
assert cached["throughput"]["prefill_tokens"] == plain["throughput"]["prefill_tokens"] - want
# The logits behind every token agree closely (the same arithmetic, on a differently shaped batch).
a = {json.loads(l)["id"]: [] for l in open(sys.argv[4])}
for path in (sys.argv[4], sys.argv[5]):
    rows = {}
    for l in open(path):
        j = json.loads(l)
        rows.setdefault(j["id"], []).append(np.array(j["logits"]))
    if path == sys.argv[4]:
        ref = rows
    else:
        for k, v in rows.items():
            for x, y in zip(ref[k], v):
                assert np.abs(x - y).max() <= 1e-4 * max(1.0, np.abs(x).max()), (k, np.abs(x - y).max())
PY
run --output "$WORK/tiny.jsonl" --stats-json "$WORK/tiny.json" --prefix-cache-mb 0.001 --prefix-cache-block $B
check "a budget below one block stores nothing and changes nothing" bash -c "cmp -s '$WORK/plain.jsonl' '$WORK/tiny.jsonl' &&
  $PY -c \"import json; p = json.load(open('$WORK/tiny.json'))['prefix_cache']; assert p['skipped_prefill_tokens'] == 0 and p['bytes'] == 0\""
run --output "$WORK/small.jsonl" --stats-json "$WORK/small.json" --prefix-cache-mb 0.05 --prefix-cache-block $B
check "a small budget evicts blocks and still gives the same output" bash -c "cmp -s '$WORK/plain.jsonl' '$WORK/small.jsonl' &&
  $PY -c \"import json; p = json.load(open('$WORK/small.json'))['prefix_cache']; assert p['evicted_blocks'] > 0 and p['bytes'] <= 0.05 * 2**20, p\""
$MPI -np 3 -x OMP_NUM_THREADS=1 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/np3.jsonl" --quiet \
  --prefix-cache-mb 16 --prefix-cache-block $B --micro-batches 1 --stats-json "$WORK/np3.json"
check "mpirun -np 3 with the prefix cache: the same output" cmp -s "$WORK/plain.jsonl" "$WORK/np3.jsonl"
$MPI -np 4 -x OMP_NUM_THREADS=1 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/np4.jsonl" --quiet \
  --prefix-cache-mb 16 --prefix-cache-block $B --micro-batches 1 --routers-per-node 2 --stats-json "$WORK/np4.json"
check "mpirun -np 4 with 2 routers (requests split by prefix): the same output, prefixes reused" bash -c "cmp -s '$WORK/plain.jsonl' '$WORK/np4.jsonl' &&
  $PY -c \"import json; p = json.load(open('$WORK/np4.json'))['prefix_cache']; assert p['skipped_prefill_tokens'] >= 160, p\""
expect_usage() { local what=$1 pattern=$2; shift 2; set +e; run --output "$WORK/x.jsonl" "$@" 2> "$WORK/err"; local rc=$?; set -e
  check "$what" bash -c "[ $rc -eq 2 ] && grep -q -- '$pattern' '$WORK/err'"; }
expect_usage "--prefix-cache-block 0 is a usage error" "--prefix-cache-block must be in" --prefix-cache-block 0
expect_usage "--prefix-cache-mb -1 is a usage error" "--prefix-cache-mb must be in" --prefix-cache-mb=-1
expect_usage "--prefix-cache-mb beyond the host's memory is a usage error" "is more than this host" --prefix-cache-mb 1073741824
finish

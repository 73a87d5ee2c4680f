#!/bin/bash
# The tiered expert cache end to end: with L1 holding 25% of a rank's experts the tokens equal the
# all-resident run, for --prefetch lru, affinity and gate, in one process and across ranks (np 4); a
# second run on the same --l2-dir starts warm (no L3 reads); the affinity graph builds from a
# routing trace; bad cache options fail with exit 2 naming the option.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
synth_model "$WORK/m"   # 3 layers x 8 experts
EXPERT=$(expert_slot_bytes "$WORK/m")   # one L1 slot: 3 x 64 x 96 x 4 = 73728 bytes stored, more packed
requests "$WORK/reqs.jsonl" 12 8
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet --trace "$WORK/trace.h5"

check "affinity build from the trace" "$MOERUN" affinity build --trace "$WORK/trace.h5" --out "$WORK/aff.h5"
"$MOERUN" affinity show "$WORK/aff.h5" --top 5 > "$WORK/show.txt"
check "affinity show prints the strongest edges and the frequencies" bash -c \
  "grep -q '^ next ' '$WORK/show.txt' && grep -q 'layer 2:' '$WORK/show.txt'"

cache_ok() {  # cache_ok STATS: the summed counters are there and L1 was used
  "$PY" - "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["cache"]
for k in ("l1_hit_rate", "l2_hit_rate", "stall_s", "prefetch_precision", "prefetch_recall", "l3_reads", "evictions"):
    assert k in c, k
assert c["l1_hits"] + c["l1_misses"] > 0 and c["evictions"] > 0, c
PY
}

# One process: 24 experts, L1 = 6 (25%).
for p in lru affinity gate; do
  "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/single-$p.jsonl" --quiet \
    --l1-bytes $((6 * EXPERT)) --prefetch $p --affinity "$WORK/aff.h5" --stats-json "$WORK/single-$p.stats"
  check "one process, L1 = 25% of the experts, --prefetch $p: same tokens" cmp -s "$WORK/ref.jsonl" "$WORK/single-$p.jsonl"
  check "one process, --prefetch $p: cache counters in --stats-json" cache_ok "$WORK/single-$p.stats"
done

# One sequence at a time (a step needs 2 of a layer's 8 experts), L1 = 12: room for the next layer's.
for p in gate lru; do
  "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/$p-1.jsonl" --quiet --max-batch-size 1 \
    --l1-bytes $((12 * EXPERT)) --prefetch $p --warmup none --stats-json "$WORK/$p-1.stats"
done
check "--prefetch gate, one sequence at a time: same tokens" cmp -s "$WORK/ref.jsonl" "$WORK/gate-1.jsonl"
check "--prefetch gate: the router's predictions were prefetched, some used, and L1 missed less than with lru" \
  "$PY" - "$WORK/gate-1.stats" "$WORK/lru-1.stats" <<'PY'
import json, sys
c, lru = (json.load(open(p))["cache"] for p in sys.argv[1:3])
assert c["prefetch_issued"] > 0 and c["prefetch_used"] > 0, c
assert c["l1_misses"] < lru["l1_misses"], (c["l1_misses"], lru["l1_misses"])
PY

# The same across ranks: the router's predictions travel with its dispatch to the expert ranks.
for p in gate lru; do
  $MPI -np 4 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/np4-$p-1.jsonl" --quiet --max-batch-size 1 \
    --l1-bytes $((4 * EXPERT)) --prefetch $p --warmup none --stats-json "$WORK/np4-$p-1.stats"
done
check "np 4, --prefetch gate: same tokens; the expert ranks got the router's predictions and missed less than with lru" \
  "$PY" - "$WORK/np4-gate-1.stats" "$WORK/np4-lru-1.stats" "$WORK/ref.jsonl" "$WORK/np4-gate-1.jsonl" <<'PY'
import json, sys
c, lru = (json.load(open(p))["cache"] for p in sys.argv[1:3])
assert open(sys.argv[3]).read() == open(sys.argv[4]).read()
assert c["prefetch_issued"] > 0 and c["prefetch_used"] > 0, c
assert c["l1_misses"] < lru["l1_misses"], (c["l1_misses"], lru["l1_misses"])
PY

# np 4: 1 router and 3 expert ranks with 8 experts each; L1 = 2 (25%), L2 on local disk.
for p in lru affinity gate; do
  $MPI -np 4 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/np4-$p.jsonl" --quiet \
    --l1-bytes $((2 * EXPERT)) --prefetch $p --affinity "$WORK/aff.h5" --l2-dir "$WORK/l2-$p" --stats-json "$WORK/np4-$p.stats"
  check "np 4, L1 = 25% of each rank's experts, L2 on disk, --prefetch $p: same tokens" cmp -s "$WORK/ref.jsonl" "$WORK/np4-$p.jsonl"
  check "np 4, --prefetch $p: summed and per-rank counters" "$PY" - "$WORK/np4-$p.stats" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert sorted(j["cache_per_rank"]) == ["1", "2", "3"], j["cache_per_rank"].keys()
assert j["cache"]["l3_reads"] == sum(r["l3_reads"] for r in j["cache_per_rank"].values())
assert j["cache"]["l3_reads"] >= 24  # every expert came from L3 once (cold L2)
PY
done
$MPI -np 4 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/warm.jsonl" --quiet \
  --l1-bytes $((2 * EXPERT)) --prefetch lru --l2-dir "$WORK/l2-lru" --stats-json "$WORK/warm.stats"
check "a second run on the same --l2-dir starts warm: same tokens, no L3 reads, L2 hit rate 1" "$PY" - "$WORK/warm.stats" "$WORK/ref.jsonl" "$WORK/warm.jsonl" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["cache"]
assert open(sys.argv[2]).read() == open(sys.argv[3]).read()
assert c["l3_reads"] == 0 and c["l2_hit_rate"] == 1.0, c
PY

# Warm-up (--warmup): every policy gives the same tokens; id-order loads all of L1 before the first
# step; on a skewed model with a decode-heavy load, hotness (coldest evicted first) misses less than
# least-recently-used. With --prefetch off and no settle the counts are deterministic.
synth_model "$WORK/skew" --gate-skew 1.5
"$PY" - "$WORK/dec.jsonl" <<'PY'
import json, random, sys
rng = random.Random(2)
with open(sys.argv[1], "w") as f:
    for i in range(16):
        f.write(json.dumps({"id": f"d{i}", "prompt_tokens": [rng.randrange(1, 199) for _ in range(6)], "max_new_tokens": 24}) + "\n")
PY
"$MOERUN" infer --model "$WORK/skew" --input "$WORK/dec.jsonl" --output "$WORK/skew-ref.jsonl" --quiet
for w in none id-order hotness; do
  "$MOERUN" infer --model "$WORK/skew" --input "$WORK/dec.jsonl" --output "$WORK/w-$w.jsonl" --quiet --max-batch-size 4 \
    --l1-bytes $((6 * EXPERT)) --warmup $w --warmup-requests 1000 --prefetch off --stats-json "$WORK/w-$w.stats"
  check "--warmup $w: same tokens" cmp -s "$WORK/skew-ref.jsonl" "$WORK/w-$w.jsonl"
done
check "id-order loads all 6 slots before serving; hotness misses less than least-recently-used" \
  "$PY" - "$WORK/w-none.stats" "$WORK/w-id-order.stats" "$WORK/w-hotness.stats" <<'PY'
import json, sys
none, ido, hot = (json.load(open(p)) for p in sys.argv[1:4])
assert ido["cache"]["warmup_loads"] == 6 and none["cache"]["warmup_loads"] == 0, ido["cache"]
assert hot["cache"]["l1_misses"] < none["cache"]["l1_misses"], (hot["cache"]["l1_misses"], none["cache"]["l1_misses"])
for s in (none, ido, hot):
    assert s["throughput"]["time_to_first_token_s"] > 0
PY
$MPI -np 4 "$MOERUN" infer --model "$WORK/skew" --input "$WORK/dec.jsonl" --output "$WORK/w-np4.jsonl" --quiet \
  --l1-bytes $((2 * EXPERT)) --warmup hotness --warmup-requests 4 --stats-json "$WORK/w-np4.stats"
check "np 4, --warmup hotness settling after 4 requests: same tokens" cmp -s "$WORK/skew-ref.jsonl" "$WORK/w-np4.jsonl"

expect_fail() {  # expect_fail CODE WHAT TEXT ARGS...: exit CODE, TEXT on stderr, no output file
  local code=$1 what=$2 text=$3; shift 3
  set +e
  "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/bad.jsonl" --quiet "$@" 2> "$WORK/err"
  local rc=$?
  set -e
  check "$what: exit $code naming $text" bash -c "[ $rc -eq $code ] && grep -q -- '$text' '$WORK/err' && [ ! -e '$WORK/bad.jsonl' ]"
}
expect_fail 2 "--prefetch affinity without a graph" "--affinity" --l1-bytes $((6 * EXPERT)) --prefetch affinity
expect_fail 2 "an L1 smaller than one expert" "--l1-bytes" --l1-bytes 1000
expect_fail 2 "an unknown policy" "--prefetch" --l1-bytes 1M --prefetch mru
expect_fail 2 "an unknown warm-up" "--warmup" --l1-bytes 1M --warmup hottest
expect_fail 2 "a size with a bad unit" "--l1-bytes" --l1-bytes 12X
# --l2-dir and --affinity with the automatic budget: the cache exists only when the experts do not
# fit; here they do, so the run goes on with them all resident and says the options are unused.
MOERUN_LOG=info "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/unused.jsonl" --quiet \
  --l2-dir "$WORK/l2-x" --affinity "$WORK/aff.h5" 2> "$WORK/unused.err"
check "--l2-dir and --affinity with every expert resident: same tokens, and a line saying they are unused" \
  bash -c 'cmp -s "$1" "$2" && grep -q "all resident: --l2-dir and --affinity are not used" "$3"' _ "$WORK/ref.jsonl" "$WORK/unused.jsonl" "$WORK/unused.err"
expect_fail 2 "an unknown L2 I/O mode" "--l2-io" --l1-bytes 1M --l2-dir "$WORK/l2-y" --l2-io mmap
expect_fail 2 "negative --s3-retries" "--s3-retries" --s3-retries -1
expect_fail 2 "a zero --s3-timeout" "--s3-timeout" --s3-timeout 0
expect_fail 4 "a missing affinity file" "$WORK/none.h5" --l1-bytes 1M --prefetch affinity --affinity "$WORK/none.h5"
# A graph built from another model's traces (4 experts, not 8).
"$MOERUN" synth --out "$WORK/m4" --layers 3 --experts 4 --top-k 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 \
  --intermediate 96 --vocab 200 --max-position 256 --eos 199 --shards 1 --quiet
"$MOERUN" infer --model "$WORK/m4" --input "$WORK/reqs.jsonl" --output "$WORK/m4.jsonl" --quiet --trace "$WORK/trace4.h5"
"$MOERUN" affinity build --trace "$WORK/trace4.h5" --out "$WORK/aff4.h5" > /dev/null
expect_fail 3 "an affinity graph of another model" "$WORK/aff4.h5: graph of 3 layers x 4 experts" \
  --l1-bytes 1M --prefetch affinity --affinity "$WORK/aff4.h5"
: > "$WORK/plainfile"
expect_fail 4 "an --l2-dir that cannot be created" "$WORK/plainfile/l2" --l1-bytes 1M --l2-dir "$WORK/plainfile/l2"
finish

#!/bin/bash
# Expert-parallel load balancing (issue 27) on a skewed synthetic workload, np 10 as 2 virtual nodes
# of 5 ranks (1 router + 4 expert ranks each):
#  - the counted imbalance (the busiest expert rank's rows per layer and step over the mean, from
#    --stats-json) drops from round-robin (>= 1.5) to a placement planned from routing traces to
#    planned + 8 replicas per layer (<= 1.15); the plans come from one request set and are measured
#    on another;
#  - outputs are the single-process bytes for every placement, over the hierarchical exchange, with
#    the expert cache, and with rebalancing on (experts moved mid-run, counted);
#  - bf16 experts split at the 512-row granule: logits bit-identical to one process (1 router);
#  - float32 experts split at any row (AVX-512): a skewed f32 model with 8 replicas at <= 1.15, and
#    tokens and logits bit-identical to one process (2 routers);
#  - a hot swap reaches every holder of a replicated expert at the same step (from the start, and
#    written mid-run: every request as before or after it, at most one per router straddling);
#  - healing: the shards corrupted after start-up, rebalancing's new copies fail verification and
#    are left out (one warning each, counted) and the job ends with the same outputs; with the
#    expert cache, an unreplicated expert's failed load ends the job with a clear error and no output;
#  - placement plan/show and bad placement files.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
NP10=($MPI -np 10 "$MOERUN" infer --ranks-per-node 5 --quiet --comm-timeout 120)
skewed_model() {  # skewed_model DIR DTYPE [SEED]
  "$MOERUN" synth --out "$1" --layers 2 --experts 16 --top-k 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 \
    --intermediate 96 --vocab 200 --max-position 256 --eos 199 --shards 2 --seed "${3:-11}" --quiet --gate-skew 1.0 --dtype "$2"
}
skewed_requests() {  # skewed_requests FILE SEED N MAX_NEW
  "$PY" - "$@" <<'PY'
import json, random, sys
path, seed, n, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
with open(path, "w") as f:
    for i in range(n):
        toks = [rng.randint(1, 198) for _ in range(40 + (i * 7) % 24)]
        f.write(json.dumps({"id": f"r{i}", "prompt_tokens": toks, "max_new_tokens": new}) + "\n")
PY
}
balance() {  # balance STATS.json FIELD
  "$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['balance'][sys.argv[2]])" "$1" "$2"
}
skewed_model "$WORK/q8" q8
skewed_requests "$WORK/a.jsonl" 3 64 4   # the trace's requests
skewed_requests "$WORK/b.jsonl" 4 64 4   # the measured ones
"$MOERUN" infer --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/ref.jsonl" --quiet

# --- Plan from a trace of one request set, count on another ---------------------------------------
"${NP10[@]}" --model "$WORK/q8" --input "$WORK/a.jsonl" --output "$WORK/trace-run.jsonl" --trace "$WORK/t.h5"
"$MOERUN" placement plan --trace "$WORK/t.h5" --trace "$WORK/t.h5.1" --nodes 2 --ranks-per-node 5 --out "$WORK/p0.json" > "$WORK/p0.txt"
"$MOERUN" placement plan --model "$WORK/q8" --trace "$WORK/t.h5" --trace "$WORK/t.h5.1" --nodes 2 --ranks-per-node 5 \
  --redundant 8 --out "$WORK/p8.json" > "$WORK/p8.txt"
check "placement plan: 8 extra slots per layer, 16 replicas, the expected imbalance printed" bash -c \
  "grep -q '8 extra slots per layer (16 replicas in all)' '$WORK/p8.txt' && grep -q '^all    planned' '$WORK/p8.txt'"
for p in rr p0 p8; do
  args=(); [ $p != rr ] && args=(--placement "$WORK/$p.json")
  "${NP10[@]}" --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/$p.jsonl" --stats-json "$WORK/$p-s.json" "${args[@]}"
  check "np 10, placement $p: the single-process output" cmp -s "$WORK/ref.jsonl" "$WORK/$p.jsonl"
done
rr=$(balance "$WORK/rr-s.json" imbalance) p0=$(balance "$WORK/p0-s.json" imbalance) p8=$(balance "$WORK/p8-s.json" imbalance)
echo "counted imbalance (busiest expert rank / mean, rows per layer and step): round-robin $rr, planned $p0, planned + 8 replicas $p8"
check "round-robin >= 1.5 > planned > planned + 8 replicas, <= 1.15" "$PY" -c "import sys; sys.exit(0 if $rr >= 1.5 and $rr > $p0 > $p8 and $p8 <= 1.15 else 1)"
check "replicas took rows and split experts" "$PY" -c "import json; b = json.load(open('$WORK/p8-s.json'))['balance']; \
  assert b['replicas'] == 16 and b['replica_rows'] > 0 and b['split_experts'] > 0 and b['steps'] > 0, b"
"$MOERUN" placement show --placement "$WORK/p8.json" --trace "$WORK/t.h5" --trace "$WORK/t.h5.1" --nodes 2 --ranks-per-node 5 > "$WORK/show.txt"
check "placement show: holders with replicas marked, round-robin against the file" bash -c \
  "grep -q '^# .*p8.json: 16 replicas' '$WORK/show.txt' && grep -q 'rank 9 holds' '$WORK/show.txt' && grep -q '^all    this file' '$WORK/show.txt'"

"${NP10[@]}" --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/hier.jsonl" --placement "$WORK/p8.json" --a2a hier
check "planned + replicas over --a2a hier: the same output" cmp -s "$WORK/ref.jsonl" "$WORK/hier.jsonl"
EXPERT=$(expert_slot_bytes "$WORK/q8")
"${NP10[@]}" --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/cache.jsonl" --placement "$WORK/p8.json" \
  --l1-bytes $((2 * EXPERT)) --l2-dir "$WORK/l2" --stats-json "$WORK/cache-s.json"
check "planned + replicas with the expert cache (2 L1 slots per rank, L2): the same output, replicas cached where they live" bash -c \
  "cmp -s '$WORK/ref.jsonl' '$WORK/cache.jsonl' && $PY -c \"import json; s = json.load(open('$WORK/cache-s.json')); \
   assert s['cache']['l3_reads'] > 0 and len(s['cache_per_rank']) == 8, s['cache']\""

# --- Rebalancing during the run -------------------------------------------------------------------
"$MOERUN" infer --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/ref256.jsonl" --quiet --max-batch-tokens 256
"${NP10[@]}" --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/rb.jsonl" --max-batch-tokens 256 \
  --rebalance-every 3 --redundant 8 --stats-json "$WORK/rb-s.json"
check "--rebalance-every 3 --redundant 8: the single-process output, experts moved mid-run, less imbalance than round-robin" bash -c \
  "cmp -s '$WORK/ref256.jsonl' '$WORK/rb.jsonl' && $PY -c \"import json; b = json.load(open('$WORK/rb-s.json'))['balance']; \
   print('rebalancing:', {k: b[k] for k in ('imbalance', 'rebalances', 'moves', 'replicas', 'steps')}); \
   assert b['rebalances'] >= 1 and b['moves'] > 0 and b['replicas'] > 0 and b['imbalance'] < $rr, b\""

# --- bf16 experts: splits at 512 rows keep the bits ------------------------------------------------
skewed_model "$WORK/bf" bfloat16
"$MOERUN" infer --model "$WORK/bf" --input "$WORK/b.jsonl" --output "$WORK/bf-ref.jsonl" --quiet --max-batch-tokens 4096 --logits-out "$WORK/bf-ref.logits"
$MPI -np 5 "$MOERUN" infer --model "$WORK/bf" --input "$WORK/a.jsonl" --output "$WORK/bf-a.jsonl" --quiet --max-batch-tokens 4096 --trace "$WORK/bt.h5"
"$MOERUN" placement plan --model "$WORK/bf" --trace "$WORK/bt.h5" --nodes 1 --ranks-per-node 5 --redundant 4 --out "$WORK/bp.json" > /dev/null
$MPI -np 5 "$MOERUN" infer --model "$WORK/bf" --input "$WORK/b.jsonl" --output "$WORK/bf5.jsonl" --quiet --max-batch-tokens 4096 \
  --placement "$WORK/bp.json" --micro-batches 1 --logits-out "$WORK/bf5.logits" --stats-json "$WORK/bf5-s.json"
splits=$(balance "$WORK/bf5-s.json" split_experts)
check "bf16, np 5 (1 router), replicas split at 512 rows ($splits splits): tokens and logits bit-identical to one process" bash -c \
  "cmp -s '$WORK/bf-ref.jsonl' '$WORK/bf5.jsonl' && cmp -s '$WORK/bf-ref.logits' '$WORK/bf5.logits' && [ $splits -gt 0 ]"

# --- float32 experts split at any row (the hand kernels' rows are independent, issue 44) ----------
if grep -m1 '^flags' /proc/cpuinfo | grep -qw avx512f; then
  skewed_model "$WORK/f32" float32
  "$MOERUN" infer --model "$WORK/f32" --input "$WORK/b.jsonl" --output "$WORK/f32-ref.jsonl" --quiet --logits-out "$WORK/f32-ref.logits"
  "${NP10[@]}" --model "$WORK/f32" --input "$WORK/a.jsonl" --output "$WORK/f32-a.jsonl" --trace "$WORK/ft.h5"
  "$MOERUN" placement plan --model "$WORK/f32" --trace "$WORK/ft.h5" --trace "$WORK/ft.h5.1" --nodes 2 --ranks-per-node 5 \
    --redundant 8 --out "$WORK/fp8.json" > /dev/null
  "${NP10[@]}" --model "$WORK/f32" --input "$WORK/b.jsonl" --output "$WORK/f32-p8.jsonl" --placement "$WORK/fp8.json" \
    --stats-json "$WORK/f32-s.json" --logits-out "$WORK/f32-p8.logits"
  fi8=$(balance "$WORK/f32-s.json" imbalance) fsplits=$(balance "$WORK/f32-s.json" split_experts)
  check "float32, np 10 (8 expert ranks), planned + 8 replicas: imbalance $fi8 <= 1.15, $fsplits splits" \
    "$PY" -c "import sys; sys.exit(0 if $fi8 <= 1.15 and $fsplits > 0 else 1)"
  same=0
  cmp -s "$WORK/f32-ref.jsonl" "$WORK/f32-p8.jsonl" && same_logits "$WORK/f32-ref.logits" "$WORK/f32-p8.logits" > /dev/null && same=1
  check "float32, replicas split at any row: tokens, log-probs and logits bit-identical to one process" [ $same -eq 1 ]
else
  echo "skip float32 replicas: this CPU has no AVX-512F (float32 experts run in oneDNN and are never split)"
fi

# --- Hot swap reaches every holder at once ---------------------------------------------------------
skewed_model "$WORK/q8b" q8 12
mkdir "$WORK/ab" && cp "$WORK/q8/model.h5" "$WORK/ab/" && cp "$WORK/q8b"/experts-*.h5 "$WORK/ab/"
"$PY" "$(dirname "$0")/rebind_shards.py" "$WORK/ab"
"$MOERUN" infer --model "$WORK/ab" --input "$WORK/b.jsonl" --output "$WORK/ab.jsonl" --quiet
echo "{\"swaps\": [{\"shard\": \"$WORK/q8b/experts-00000.h5\", \"experts\": \"all\"}, {\"shard\": \"$WORK/q8b/experts-00001.h5\", \"experts\": \"all\"}]}" > "$WORK/swap.json"
"${NP10[@]}" --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/swapped.jsonl" --placement "$WORK/p8.json" \
  --swap-control "$WORK/swap.json" --stats-json "$WORK/swapped-s.json"
check "hot swap with replicas: the output of the model with the new experts, one control file applied" bash -c \
  "! cmp -s '$WORK/ref.jsonl' '$WORK/ab.jsonl' && cmp -s '$WORK/ab.jsonl' '$WORK/swapped.jsonl' && \
   $PY -c \"import json; h = json.load(open('$WORK/swapped-s.json'))['hot_swap']; assert h['applied'] == 1 and h['experts'] == 48, h\""

# Mid-run: the control file appears once two results are journaled; one request at a time per router.
# Every request is as before the swap or as after it, but for at most one per router that straddles
# it (replicas swapping at different steps would give more mixed ones).
skewed_requests "$WORK/long.jsonl" 6 32 12
"$MOERUN" infer --model "$WORK/q8" --input "$WORK/long.jsonl" --output "$WORK/long-a.jsonl" --quiet --max-batch-size 1
"$MOERUN" infer --model "$WORK/ab" --input "$WORK/long.jsonl" --output "$WORK/long-ab.jsonl" --quiet --max-batch-size 1
"${NP10[@]}" --model "$WORK/q8" --input "$WORK/long.jsonl" --output "$WORK/live.jsonl" --placement "$WORK/p8.json" \
  --max-batch-size 1 --swap-control "$WORK/live.json" --stats-json "$WORK/live-s.json" &
pid=$!
wait_for_results "$WORK/live.jsonl" 2 $pid
cp "$WORK/swap.json" "$WORK/live.tmp" && mv "$WORK/live.tmp" "$WORK/live.json"
wait $pid
check "hot swap mid-run with replicas: each request as before or after it, at most one per router in between" \
  "$PY" - "$WORK/long-a.jsonl" "$WORK/long-ab.jsonl" "$WORK/live.jsonl" "$WORK/live-s.json" <<'PY'
import json, sys
a, ab, live = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
assert [r["id"] for r in live] == [r["id"] for r in a], "lost or repeated requests"
old = sum(l == x for l, x in zip(live, a)); new = sum(l == y for l, y in zip(live, ab))
mixed = len(live) - old - new
h = json.load(open(sys.argv[4]))["hot_swap"]
print(f"{old} requests as before the swap, {new} as after, {mixed} straddling it")
assert h["applied"] == 1 and new > 0 and mixed <= 2, (h, old, new, mixed)
PY

# --- Healing: the shards go bad after start-up -----------------------------------------------------
# The corruption is planned before a job starts (h5py takes a while to import) and applied in
# milliseconds once its first result is out, far from its first rebalancing step.
corruption_spots() {  # corruption_spots MODEL_DIR SPOTS: one byte of every expert's w1 (a single chunk)
  "$PY" - "$1" > "$2" <<'PY'
import glob, sys, h5py
for path in sorted(glob.glob(sys.argv[1] + "/experts-*.h5")):
    with h5py.File(path, "r") as f:
        for l in f["layers"]:
            for e in f["layers"][l]["experts"]:
                print(path, f["layers"][l]["experts"][e]["w1"].id.get_chunk_info(0).byte_offset + 3)
PY
}
corrupt_spots() {  # corrupt_spots SPOTS: flips a bit of each byte listed, in place
  "$PY" -S - "$1" <<'PY'
import sys
spots = [l.split() for l in open(sys.argv[1])]
for path, off in spots:
    with open(path, "r+b") as f:
        f.seek(int(off)); b = f.read(1); f.seek(int(off)); f.write(bytes([b[0] ^ 0x20]))
print(len(spots), "experts corrupted")
PY
}
skewed_requests "$WORK/one.jsonl" 5 24 8
sed -i '1s/"max_new_tokens": 8/"max_new_tokens": 1/' "$WORK/one.jsonl"  # the first result after one step
"$MOERUN" infer --model "$WORK/q8" --input "$WORK/one.jsonl" --output "$WORK/one-ref.jsonl" --quiet --max-batch-size 1
cp -r "$WORK/q8" "$WORK/heal"
corruption_spots "$WORK/heal" "$WORK/heal.spots"
"${NP10[@]}" --model "$WORK/heal" --input "$WORK/one.jsonl" --output "$WORK/heal.jsonl" --max-batch-size 1 \
  --rebalance-every 40 --redundant 8 --stats-json "$WORK/heal-s.json" 2> "$WORK/heal.err" &
pid=$!
wait_for_results "$WORK/heal.jsonl" 1 $pid
corrupt_spots "$WORK/heal.spots"
rc=0; wait $pid || rc=$?
check "shards corrupted mid-run: rebalancing's copies fail verification and are left out; same output, heals counted" bash -c \
  "[ $rc -eq 0 ] && cmp -s '$WORK/one-ref.jsonl' '$WORK/heal.jsonl' && grep -q 'cannot take .* new expert copies (first: expert .*checksum mismatch' '$WORK/heal.err' && \
   $PY -c \"import json; b = json.load(open('$WORK/heal-s.json'))['balance']; print('healing:', {k: b[k] for k in ('rebalances', 'heals', 'moves')}); \
   assert b['heals'] > 0, b\""

cp -r "$WORK/q8" "$WORK/bad"
corruption_spots "$WORK/bad" "$WORK/bad.spots"
$MPI -np 5 "$MOERUN" infer --model "$WORK/bad" --input "$WORK/one.jsonl" --output "$WORK/bad.jsonl" --quiet --max-batch-size 1 \
  --l1-bytes $((2 * EXPERT)) --comm-timeout 60 2> "$WORK/bad.err" &
pid=$!
wait_for_results "$WORK/bad.jsonl" 1 $pid
corrupt_spots "$WORK/bad.spots"
rc=0; wait $pid || rc=$?
check "an unreplicated expert's load fails mid-run (expert cache): exit 3 naming the expert, no output file ($(head -c 300 "$WORK/bad.err"))" bash -c \
  "[ $rc -eq 3 ] && grep -q 'checksum mismatch' '$WORK/bad.err' && grep -q 'layers/[0-9]*/experts/[0-9]*' '$WORK/bad.err' && [ ! -e '$WORK/bad.jsonl' ]"

# --- Bad input ----------------------------------------------------------------------------------
echo '{"0": {"0": [1, 1]}}' > "$WORK/twice.json"
set +e
"${NP10[@]}" --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/x.jsonl" --placement "$WORK/twice.json" 2> "$WORK/twice.err"; rc=$?
"$MOERUN" placement plan --trace "$WORK/t.h5" --nodes 2 --ranks-per-node 5 --redundant -1 --out "$WORK/x.json" 2> "$WORK/neg.err"; rc2=$?
"$MOERUN" placement plan --trace "$WORK/nowhere.h5" --nodes 2 --ranks-per-node 5 --out "$WORK/x.json" 2> "$WORK/none.err"; rc3=$?
# --device-bytes: inspect's model of an expert rank's memory caps the experts it holds (fewer extra
# slots), and a budget that holds none is a usage error.
total_for() {  # total_for N: inspect's total for an expert rank holding N experts, in bytes (to 0.01 of its unit)
  "$MOERUN" inspect --model "$WORK/q8" --nodes 2 --ranks-per-node 5 --experts-per-rank "$1" | "$PY" -c "import re, sys; \
    m = re.search(r'expert rank holding [0-9]+ experts.*?total +([0-9.]+) (KiB|MiB)', sys.stdin.read(), re.S); \
    print(int(float(m.group(1)) * (1024 if m.group(2) == 'KiB' else 1 << 20)))"
}
four=$(( ($(total_for 4) + $(total_for 5)) / 2 ))   # holds 4 experts, not 5
"$MOERUN" placement plan --model "$WORK/q8" --trace "$WORK/t.h5" --trace "$WORK/t.h5.1" --nodes 2 --ranks-per-node 5 --redundant 8 \
  --device-bytes "$four" --out "$WORK/capped.json" > "$WORK/capped.txt"; rc4=$?
"$MOERUN" placement plan --model "$WORK/q8" --trace "$WORK/t.h5" --nodes 2 --ranks-per-node 5 --device-bytes 1000 --out "$WORK/y.json" 2> "$WORK/tiny.err"; rc5=$?
"$MOERUN" synth --out "$WORK/other" --layers 3 --experts 16 --top-k 2 \
  --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 96 --vocab 200 --shards 1 --quiet
"$MOERUN" placement plan --model "$WORK/other" --trace "$WORK/t.h5" --nodes 2 --ranks-per-node 5 --out "$WORK/z.json" 2> "$WORK/other.err"; rc6=$?
"${NP10[@]}" --model "$WORK/q8" --input "$WORK/b.jsonl" --output "$WORK/w.jsonl" --rebalance-every -1 2> "$WORK/every.err"; rc7=$?
set -e
check "traces of another model: exit 3 naming both shapes, no placement file" bash -c \
  "[ $rc6 -eq 3 ] && grep -q 'the traces have 2 MoE layers x 16 experts, but .*other has 3 x 16' '$WORK/other.err' && [ ! -e '$WORK/z.json' ]"
check "--rebalance-every -1: exit 2 naming the option, no output" bash -c \
  "[ $rc7 -eq 2 ] && grep -q -- '--rebalance-every must be >= 0' '$WORK/every.err' && [ ! -e '$WORK/w.jsonl' ]"
check "--device-bytes that holds 4 experts (an even share, inspect's total): no replicas fit, each rank 4 experts" bash -c \
  "[ $rc4 -eq 0 ] && grep -q '0 extra slots per layer (0 replicas in all) (8 asked: 4 experts per rank fit' '$WORK/capped.txt'"
check "--device-bytes that holds no expert: exit 2" bash -c "[ $rc5 -eq 2 ] && grep -q 'holds no expert of' '$WORK/tiny.err' && [ ! -e '$WORK/y.json' ]"
check "a rank listed twice for one expert: exit 3 naming the file and entry" bash -c "[ $rc -eq 3 ] && grep -q 'twice.json: layer 0 expert 0: rank 1 is listed twice' '$WORK/twice.err'"
check "--redundant -1: exit 2" bash -c "[ $rc2 -eq 2 ] && grep -q -- '--redundant must be >= 0' '$WORK/neg.err'"
check "a missing trace: a clear error, no placement file" bash -c "[ $rc3 -ne 0 ] && grep -q 'nowhere.h5' '$WORK/none.err' && [ ! -e '$WORK/x.json' ]"
finish

#!/bin/bash
# Expert-similarity batching (--batching minhash) on a synthetic model whose vocabulary splits into
# topics with their own experts (synth --gate-topics): the output equals FIFO batching (one process
# and mpirun -np 4), and with an L1 of a quarter of the experts the hit rate goes up.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
synth_model "$WORK/m" --gate-skew 2 --gate-topics 4
EXPERT=$(expert_slot_bytes "$WORK/m")   # one L1 slot
"$PY" - "$WORK/reqs.jsonl" <<'PY'
import json, random, sys
rng = random.Random(1)
with open(sys.argv[1], "w") as f:
    for i in range(32):
        t = rng.randrange(4)   # topic t: token ids [50t, 50t + 50)
        f.write(json.dumps({"id": f"r{i}", "prompt_tokens": [rng.randrange(50 * t, 50 * t + 50) for _ in range(10)],
                            "max_new_tokens": 16}) + "\n")
PY
run() { "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --quiet --max-batch-size 4 "$@"; }
run --output "$WORK/ref.jsonl"
run --output "$WORK/fifo.jsonl" --l1-bytes $((6 * EXPERT)) --prefetch off --warmup none --stats-json "$WORK/fifo.json"
run --output "$WORK/mh.jsonl" --l1-bytes $((6 * EXPERT)) --prefetch off --warmup none --stats-json "$WORK/mh.json" --batching minhash
check "minhash batching: the same output as FIFO" bash -c "cmp -s '$WORK/ref.jsonl' '$WORK/fifo.jsonl' && cmp -s '$WORK/ref.jsonl' '$WORK/mh.jsonl'"
check "minhash batching: L1 hit rate up on a topic workload; batches formed by similarity" "$PY" - "$WORK/fifo.json" "$WORK/mh.json" <<'PY'
import json, sys
f, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
hf, hm = f["cache"]["l1_hit_rate"], m["cache"]["l1_hit_rate"]
print(f"L1 hit rate: fifo {hf:.3f}, minhash {hm:.3f}; tokens/s fifo {f['tokens_per_s']:.0f}, minhash {m['tokens_per_s']:.0f}")
b = m["batching"]
assert hm > hf + 0.05, (hf, hm)
assert b["batches"] >= 4 and b["joined_similar"] > 0 and b["mean_similarity"] >= 0.7, b
assert "batching" not in f
PY
run --output "$WORK/mh0.jsonl" --batching minhash --batching-threshold 0 --batching-pool 4 --stats-json "$WORK/mh0.json"
check "threshold 0 and a pool of one batch: the same output" cmp -s "$WORK/ref.jsonl" "$WORK/mh0.jsonl"
$MPI -np 4 -x OMP_NUM_THREADS=1 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/np4.jsonl" --quiet \
  --comm-timeout 60 --max-batch-size 4 --batching minhash --micro-batches 1 --l1-bytes $((2 * EXPERT))
check "mpirun -np 4 with minhash batching and a cache: the same output" cmp -s "$WORK/ref.jsonl" "$WORK/np4.jsonl"
for bad in "--batching lifo:--batching" "--batching-threshold 1.5:--batching-threshold" "--batching-max-wait 0:--batching-max-wait"; do
  set +e; run --output "$WORK/x.jsonl" ${bad%%:*} 2> "$WORK/err"; rc=$?; set -e
  check "${bad%%:*} is a usage error" bash -c "[ $rc -eq 2 ] && grep -q -- '${bad##*:}' '$WORK/err'"
done
finish

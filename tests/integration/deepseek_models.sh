#!/bin/bash
# DeepSeek-V2/V3/V3.2 through the whole runtime on synthetic models (`synth --family deepseek_v2|v3|v32`):
# MLA with its compressed KV cache, group-limited routing (V3: sigmoid scores with a correction
# bias), shared experts, a dense first layer. V2 at V2-Lite's expert count: 64 experts, top-6. With
# one router and one micro-batch (as one process runs: the same GEMM row counts on the router), np 5
# and np 9 (flat), np 9 over the hierarchical exchange, and the expert cache at 25% (one process and
# np 5) give the one-process bytes; 2 nodes x 5 with a router each give its tokens
# (a second router runs the dense layer and shared experts over other rows: rounding only). The
# absorbed and expanded attention agree; `inspect` names the MLA cache. At V3's 256 experts top-8: a
# routing trace, its affinity graph, the cache with affinity prefetch in one process and at np 5
# give the same bytes, and the stats count every expert. Bad v6 attributes are exit 3.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"
ds_model() {  # ds_model DIR FAMILY EXPERTS TOP_K
  "$MOERUN" synth --out "$1" --family "$2" --layers 3 --experts "$3" --top-k "$4" --hidden 64 --heads 4 --head-dim 24 \
    --intermediate 32 --vocab 200 --max-position 256 --eos 199 --shards 3 --seed 5 --quiet
}
requests "$WORK/reqs.jsonl" 10 6
ds_model "$WORK/v2" deepseek_v2 64 6
ds_model "$WORK/v3" deepseek_v3 16 4
ds_model "$WORK/v32" deepseek_v32 16 4  # DSA: 8 positions a query, fewer than the longer prompts'

"$MOERUN" inspect --model "$WORK/v2" > "$WORK/v2.inspect"
check "inspect: MLA's cache of kv_lora + rope values a token" grep -q "the KV cache holds 40 values a token and layer (multi-head attention of these heads: 160)" "$WORK/v2.inspect"
"$MOERUN" inspect --model "$WORK/v3" > "$WORK/v3.inspect"
"$MOERUN" inspect --model "$WORK/v32" > "$WORK/v32.inspect"
check "inspect: DSA's cache row (latent, RoPE key and the indexer's key) and its indexer" \
  grep -q "the KV cache holds 56 values a token and layer" "$WORK/v32.inspect"
check "inspect: DSA's indexer" grep -q "sparse attention (DSA): each query attends its top 8 positions by an indexer of 4 heads of 16" "$WORK/v32.inspect"
check "inspect: V3's routing" grep -q "routing: sigmoid scores with a correction bias, 4 group(s), best 2 kept (by their best two), weights renormalised x 2.5; shared experts, ungated" "$WORK/v3.inspect"

same_bytes() {  # same_bytes WHAT REF GOT: tokens and logits, byte for byte
  if cmp -s "$2.jsonl" "$3.jsonl" && cmp -s "$2.logits" "$3.logits"; then ok "$1: the one-process tokens and logits, bit for bit"
  else bad "$1: differs from one process ($(tail -2 "$3.err" 2>/dev/null | tr '\n' ' '))"; fi
}
for v in v2 v3 v32; do
  m="$WORK/$v"
  run() {  # run NAME NP ARGS...
    local name=$1 np=$2; shift 2
    local cmd=("$MOERUN")
    [ "$np" -gt 1 ] && cmd=($MPI -np "$np" "$MOERUN")
    "${cmd[@]}" infer --model "$m" --input "$WORK/reqs.jsonl" --output "$WORK/$v-$name.jsonl" --logits-out "$WORK/$v-$name.logits" \
      --quiet --comm-timeout 60 "$@" 2> "$WORK/$v-$name.err"
  }
  run ref 1
  slot=$(expert_slot_bytes "$m")
  experts=$(sed -n 's/^  experts *[0-9]* (\([0-9]*\) experts.*/\1/p' "$WORK/$v.inspect")
  run np5 5 --micro-batches 1 && same_bytes "$v: np 5 (1 router, 4 expert ranks)" "$WORK/$v-ref" "$WORK/$v-np5"
  run np9 9 --micro-batches 1 && same_bytes "$v: np 9 (1 router, 8 expert ranks)" "$WORK/$v-ref" "$WORK/$v-np9"
  run hier9 9 --micro-batches 1 --a2a hier && same_bytes "$v: np 9 over the hierarchical exchange" "$WORK/$v-ref" "$WORK/$v-hier9"
  run l1 1 --l1-bytes $((experts * slot / 4)) --l2-dir "$WORK/$v-l2" && same_bytes "$v: L1 at 25% + L2, one process" "$WORK/$v-ref" "$WORK/$v-l1"
  run l1np5 5 --micro-batches 1 --l1-bytes $((experts * slot / 16)) --l2-dir "$WORK/$v-l2np5" \
    && same_bytes "$v: np 5, each expert rank's L1 at 25% + L2" "$WORK/$v-ref" "$WORK/$v-l1np5"
  if run nodes 10 --ranks-per-node 5 --a2a hier && cmp -s <(sort "$WORK/$v-ref.jsonl") <(cat "$WORK/$v-nodes.jsonl"* | sort); then
    ok "$v: 2 nodes x 5 (a router each) over the hierarchical exchange: the same tokens"
  else
    bad "$v: 2 nodes x 5: $(tail -2 "$WORK/$v-nodes.err" | tr '\n' ' ')"
  fi
  run absorbed 1 --mla-attention absorbed && run expanded 1 --mla-attention expanded
  check "$v: absorbed and expanded attention: the same tokens, logits within 1e-5" "$PY" - "$WORK/$v-absorbed" "$WORK/$v-expanded" <<'PY'
import json, sys
def load(p):
    d = {}
    for line in open(p + ".logits"):
        r = json.loads(line)
        d.setdefault(r["id"], []).append(r["logits"])
    return d
assert open(sys.argv[1] + ".jsonl").read() == open(sys.argv[2] + ".jsonl").read()
a, b = load(sys.argv[1]), load(sys.argv[2])
worst = max(max(abs(p - q) for p, q in zip(x, y)) / max(abs(q) for q in y) for k in a for x, y in zip(a[k], b[k]))
print(f"  worst relative difference {worst:.1e}")
assert worst <= 1e-5, worst
PY
done

# DeepSeek-V3's scale: 256 experts a layer, top-8, in 8 groups of 32 kept 4. A routing trace, the
# affinity graph built from it (256 x 256 a layer), the cache at 25% with affinity prefetch in one
# process and at np 5, the stats: the all-resident tokens and logits.
"$MOERUN" synth --out "$WORK/v3big" --family deepseek_v3 --layers 3 --experts 256 --top-k 8 --hidden 64 --heads 4 --head-dim 24 \
  --intermediate 32 --vocab 200 --max-position 256 --eos 199 --shards 4 --seed 7 --quiet
"$MOERUN" infer --model "$WORK/v3big" --input "$WORK/reqs.jsonl" --output "$WORK/big-ref.jsonl" --logits-out "$WORK/big-ref.logits" \
  --quiet --trace "$WORK/big.trace.h5" --stats-json "$WORK/big.stats"
check "256 experts: the affinity graph from the trace" "$MOERUN" affinity build --trace "$WORK/big.trace.h5" --out "$WORK/big-aff.h5"
bigslot=$(expert_slot_bytes "$WORK/v3big")
"$MOERUN" infer --model "$WORK/v3big" --input "$WORK/reqs.jsonl" --output "$WORK/big-l1.jsonl" --logits-out "$WORK/big-l1.logits" --quiet \
  --l1-bytes $((2 * 256 * bigslot / 4)) --prefetch affinity --affinity "$WORK/big-aff.h5" 2> "$WORK/big-l1.err"
same_bytes "256 experts: L1 at 25% with affinity prefetch" "$WORK/big-ref" "$WORK/big-l1"
$MPI -np 5 "$MOERUN" infer --model "$WORK/v3big" --input "$WORK/reqs.jsonl" --output "$WORK/big-np5.jsonl" --logits-out "$WORK/big-np5.logits" \
  --quiet --micro-batches 1 --l1-bytes $((2 * 256 * bigslot / 16)) --prefetch affinity --affinity "$WORK/big-aff.h5" 2> "$WORK/big-np5.err"
same_bytes "256 experts: np 5, L1 at 25% of each rank's experts, affinity prefetch" "$WORK/big-ref" "$WORK/big-np5"
check "256 experts: the stats count every layer's 256 experts, top-8 of every token" "$PY" - "$WORK/big.stats" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
u = s["expert_usage"]
assert len(u) == 2 and all(len(row) == 256 for row in u), [len(r) for r in u]  # 2 MoE layers (the first is dense)
assert all(sum(row) == 8 * s["tokens"] for row in u), ([sum(r) for r in u], s["tokens"])
PY

# Bad input: DeepSeek's attributes in a file that says version 5, groups that do not divide the experts.
edit() {  # edit NAME PYTHON: a copy of v3 with model.h5 changed
  rm -rf "$WORK/$1" && cp -r "$WORK/v3" "$WORK/$1"
  "$PY" -c "
import h5py
with h5py.File('$WORK/$1/model.h5', 'r+') as f:
$2
"
}
expect3() {  # expect3 WHAT MODEL TEXT
  local out rc=0
  out=$("$MOERUN" infer --model "$2" --input "$WORK/reqs.jsonl" --output "$WORK/x.jsonl" --quiet 2>&1) || rc=$?
  if [ "$rc" -eq 3 ] && grep -qF -- "$3" <<< "$out"; then ok "$1 (exit 3)"; else bad "$1: exit $rc: $out"; fi
}
edit v5 "    f.attrs['format_version'] = 5"
expect3 "MLA in a version-5 file" "$WORK/v5" "MLA or DeepSeek routing attributes need format_version 6, the file says 5"
edit groups "    f.attrs['router_groups'] = 3"
expect3 "router_groups not dividing the experts" "$WORK/groups" "attribute router_groups is 3, expected a divisor of num_experts (16)"
edit mla "    f.attrs['head_dim'] = 20"
expect3 "an MLA head_dim that is not nope + rope" "$WORK/mla" "attribute head_dim is 20, expected qk_nope_head_dim + qk_rope_head_dim = 24 (MLA)"
# ... and DSA's (copies of v32).
edit() {  # edit NAME PYTHON: a copy of v32 with model.h5 changed
  rm -rf "$WORK/$1" && cp -r "$WORK/v32" "$WORK/$1"
  "$PY" -c "
import h5py
with h5py.File('$WORK/$1/model.h5', 'r+') as f:
$2
"
}
edit dsa10 "    f.attrs['format_version'] = 10"
expect3 "DSA in a version-10 file" "$WORK/dsa10" "DSA's indexer attributes (index_n_heads, ...) need format_version 11, the file says 10"
edit dsadim "    f.attrs['index_head_dim'] = 4"
expect3 "an index head narrower than its RoPE part" "$WORK/dsadim" "attribute index_head_dim is 4, expected in [8, 4096]"
edit dsashared "    f.attrs['index_layer_types'] = 'shared,full,full'"
expect3 "a first layer that shares a choice" "$WORK/dsashared" "attribute index_layer_types starts with shared"
edit dsaweights "    del f['layers/1/indexer/wk']"
expect3 "a missing indexer matrix" "$WORK/dsaweights" "layers/1/indexer/wk"

# An indexer weight that is finite but overflows float32 in use (issue 77): its scores are Inf/NaN, so
# every request that meets it ends with an error line naming the layer and the run exits 3, as an
# overflowing expert or LM head does; before, tokens were chosen from NaN scores with exit 0.
rm -rf "$WORK/dsainf" && cp -r "$WORK/v32" "$WORK/dsainf" && rm -f "$WORK"/dsainf/dense-*.bin
"$PY" -c "
import h5py, numpy as np, xxhash
with h5py.File('$WORK/dsainf/model.h5', 'r+') as f:
    d = f['layers/1/indexer/weights_proj']
    a = np.full(d.shape, 3e38, d.dtype)
    d[...] = a
    if 'xxh64' in d.attrs:
        d.attrs['xxh64'] = np.uint64(xxhash.xxh64(a.tobytes(), seed=0).intdigest())
"
set +e
"$MOERUN" infer --model "$WORK/dsainf" --input "$WORK/reqs.jsonl" --output "$WORK/dsainf.jsonl" --quiet 2> "$WORK/dsainf.err"
rc=$?
set -e
check "an overflowing indexer weight: exit 3, every line an error naming layer 1 (exit $rc: $(tail -1 "$WORK/dsainf.err"))" \
  bash -c "[ $rc -eq 3 ] && [ \$(grep -c 'non-finite values (NaN or Inf) from layer 1 ' '$WORK/dsainf.jsonl') -eq 10 ]"
# DSA after a kill: --resume with other batches gives the uninterrupted run's bytes (the indexer
# keys are recomputed with the rest of each row).
kill_after_journal "$WORK/v32-resume.jsonl" 3 "$MOERUN" infer --model "$WORK/v32" --input "$WORK/reqs.jsonl" --output "$WORK/v32-resume.jsonl" \
  --quiet --max-batch-size 1
"$MOERUN" infer --model "$WORK/v32" --input "$WORK/reqs.jsonl" --output "$WORK/v32-resume.jsonl" --quiet --max-batch-size 4 --resume
check "v32: killed after 3 results, --resume with other batches: the uninterrupted run's tokens" cmp -s "$WORK/v32-ref.jsonl" "$WORK/v32-resume.jsonl"
finish

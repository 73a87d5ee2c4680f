#!/bin/bash
# Two builds of moerun, bit for bit: a model of every family synthesized by OLD, run by OLD and NEW
# at np 1, 4 and 8 (np 8 with 2 routers per node), 4 requests with top-3 log-probs; each output
# pair must be byte-identical. Then synth itself: NEW's files equal OLD's for a few variants.
# For refactors (issue 42's before/after). Not in CI: it needs a second build.
#   usage: launch/compare-builds.sh OLD/build/launch/moerun NEW/build/launch/moerun WORK_DIR
# (PY: a Python with h5py and numpy, e.g. build/venv/bin/python; FAMILIES: the families to compare, when
# OLD predates some.)
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -u
OLD=$1 NEW=$2 W=$3 PY=${PY:-python3}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1"
mkdir -p $W
python3 - > $W/req.jsonl <<'PY'
import json, random
r = random.Random(5)
for i in range(4):
    print(json.dumps({"id": f"r{i}", "prompt_tokens": [1] + [r.randrange(3, 190) for _ in range(5 + 3 * i)], "max_new_tokens": 6, "logprobs": 3}))
PY
for fam in ${FAMILIES:-mixtral qwen2_moe olmoe qwen3_moe gpt_oss deepseek_v2 deepseek_v3 deepseek_v32 glm4_moe glm_moe_dsa minimax_m2 qwen3_next qwen3_5_moe}; do
  m=$W/$fam
  extra=""
  case $fam in gpt_oss) extra="--sliding-window 4";; esac
  $OLD synth --out $m --family $fam --layers 3 --experts 8 --top-k 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 \
    --intermediate 96 --vocab 200 --max-position 256 --eos 199 --shards 2 --seed 11 --quiet $extra || { echo "$fam: synth failed"; continue; }
  line="$fam:"
  for np in 1 4 8; do
    routers=""; [ $np = 8 ] && routers="--routers-per-node 2"
    for who in OLD NEW; do
      bin=${!who}
      if [ $np = 1 ]; then $bin infer --model $m --input $W/req.jsonl --output $W/$fam.$np.$who.jsonl --quiet >/dev/null 2>&1
      else $MPI -np $np $bin infer --model $m --input $W/req.jsonl --output $W/$fam.$np.$who.jsonl --quiet $routers >/dev/null 2>&1; fi
    done
    if cmp -s $W/$fam.$np.OLD.jsonl $W/$fam.$np.NEW.jsonl && [ -s $W/$fam.$np.NEW.jsonl ]; then line="$line np$np identical"; else line="$line np$np DIFFER"; fi
  done
  echo "$line"
done
# Synth itself: NEW's model.h5 and shards hold the same datasets, bit for bit, as OLD's (with skew
# and topics too).
for args in "--family qwen3_next" "--family deepseek_v3" "--gate-skew 1.5 --gate-topics 4" "--family gpt_oss --sliding-window 4"; do
  for who in OLD NEW; do
    rm -rf $W/syn-$who
    ${!who} synth --out $W/syn-$who --layers 3 --experts 8 --top-k 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 \
      --intermediate 96 --vocab 200 --max-position 256 --eos 199 --shards 2 --seed 11 --quiet $args
  done
  $PY - $W/syn-OLD $W/syn-NEW "$args" <<'PY'
import h5py, sys, glob, os, numpy as np
a, b, args = sys.argv[1:]
def walk(f):
    out = {}
    f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out
same = True
for name in sorted(os.listdir(a)):
    if not name.endswith(".h5"): continue
    x, y = walk(h5py.File(os.path.join(a, name))), walk(h5py.File(os.path.join(b, name)))
    same &= x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
    ax, ay = dict(h5py.File(os.path.join(a, name)).attrs), dict(h5py.File(os.path.join(b, name)).attrs)
    same &= sorted(ax) == sorted(ay) and all(np.array_equal(ax[k], ay[k]) for k in ax)
print(f"synth {args}: datasets and attributes", "identical" if same else "DIFFER")
PY
done

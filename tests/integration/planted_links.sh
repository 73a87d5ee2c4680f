#!/bin/bash
# The one rule for files moerun writes (issue 63), end to end: a symlink or hard link planted at
# every name a command writes, pointing at a file the run reads (the model, a shard, the requests,
# the checkpoint) or at a bystander. Named outputs and files written in place (journal, lock, L2
# blob) refuse the link with exit 2 and one line; files moerun makes on its own (the model's caches,
# the L2 index, convert's and synth's files) replace the link. Either way no target changes a byte.
# Also: outputs that name the model's files (placement plan), an L2 directory that is someone's
# to write or is the --output, and two runs sharing one L2 directory (no refetch warnings, no
# duplicate entries), and convert's staging directory for an s3:// --out (a real S3 server,
# cluster/objectstore). tests/io/check_file_writers.py keeps every writer of the tree on the rule.
source "$(dirname "$0")/common.sh"
cd "$WORK"
synth_model m
requests R 3 3
cp R R.orig
echo "bystander" > victim
# What the links point at: the model's files, the requests, a bystander (and later the checkpoint).
TARGETS="m/model.h5 m/experts-00000.h5 m/experts-00001.h5 R victim"
sums() { sha256sum $TARGETS; }
sums > before.sums
untouched() { sums > now.sums; check "$1: no target changed a byte" cmp -s now.sums before.sums; }

# refuse NAME PATTERN CODE -- moerun args...: exit CODE, one line matching PATTERN
refuse() {
  local name=$1 pattern=$2 code=$3; shift 4
  local rc=0
  "$MOERUN" "$@" > /dev/null 2> err || rc=$?
  if [ "$rc" -eq "$code" ] && grep -q -- "$pattern" err && [ "$(wc -l < err)" -eq 1 ]; then
    ok "$name (exit $code: $(cat err))"
  else
    bad "$name: exit $rc, $(cat err)"
  fi
}
# replaced NAME LINK -- moerun args...: exit 0, LINK is now a regular file
replaced() {
  local name=$1 link=$2; shift 3
  local rc=0
  "$MOERUN" "$@" > /dev/null 2> err || rc=$?
  check "$name: exit $rc, the planted link replaced by a file ($(head -c 200 err))" bash -c "[ $rc -eq 0 ] && [ -f '$link' ] && [ ! -L '$link' ]"
}
infer() { echo infer --model m --input R --quiet; }

# 1. Named outputs, of every command that writes one.
for opt in --output --stats-json --trace --logits-out; do
  ln -sf ../victim "o$opt"  # a relative link, as an attacker would plant it
  args="$(infer) --output o.jsonl"
  [ "$opt" = --output ] && args="$(infer)"
  refuse "infer $opt through a link" "o$opt: is a symbolic link" 2 -- $args $opt "o$opt"
done
ln -sf m/model.h5 pp.json
echo "[1, 5, 9, 13, 17, 21, 25, 29, 33, 37]" > toks.json
refuse "perplexity --json through a link to the model" "pp.json: is a symbolic link" 2 -- \
  perplexity --model m --tokens toks.json --context 5 --json pp.json --quiet
refuse "perplexity --save-logits through a link" "pp.json: is a symbolic link" 2 -- \
  perplexity --model m --tokens toks.json --context 5 --save-logits pp.json --quiet
refuse "bench layer --json through a link" "pp.json: is a symbolic link" 2 -- bench layer --tokens 8 --json pp.json
"$MOERUN" infer --model m --input R --output t.jsonl --trace trace.h5 --quiet
refuse "affinity build --out through a link" "pp.json: is a symbolic link" 2 -- affinity build --trace trace.h5 --out pp.json
refuse "placement plan --out through a link" "pp.json: is a symbolic link" 2 -- \
  placement plan --trace trace.h5 --nodes 1 --ranks-per-node 2 --out pp.json
refuse "placement plan --out naming the model's model.h5" "is the --model file" 2 -- \
  placement plan --trace trace.h5 --nodes 1 --ranks-per-node 2 --model m --out m/model.h5
refuse "placement plan --out naming a shard" "is the --model file" 2 -- \
  placement plan --trace trace.h5 --nodes 1 --ranks-per-node 2 --model m --out m/experts-00001.h5
untouched "named outputs"

# 2. Files written in place next to the output: the journal and the lock.
ln -sf m/experts-00000.h5 j.jsonl.journal
refuse "the journal through a link (--resume)" "j.jsonl.journal: is a symbolic link" 2 -- $(infer) --output j.jsonl --resume
refuse "the journal through a link" "j.jsonl.journal: is a symbolic link" 2 -- $(infer) --output j.jsonl
rm j.jsonl.journal
ln m/experts-00000.h5 j.jsonl.journal  # a hard link: a second name of the shard
refuse "the journal as a hard link of a shard" "has 2 hard links" 2 -- $(infer) --output j.jsonl --resume
rm j.jsonl.journal
ln -sf ../R k.jsonl.lock
refuse "the lock through a link" "k.jsonl.lock: is a symbolic link" 2 -- $(infer) --output k.jsonl
rm k.jsonl.lock
untouched "journal and lock"

# 3. The caches kept next to the model: a link there (to the model, to the requests) is replaced.
ln -sf model.h5 m/experts-index.bin
ln -sf ../R m/dense-q8.bin
ln -sf ../victim m/dense-q4.bin
replaced "experts-index.bin planted as a link to model.h5" m/experts-index.bin -- $(infer) --output c1.jsonl
replaced "dense-q8.bin planted as a link to the requests" m/dense-q8.bin -- $(infer) --output c2.jsonl --quantize-dense q8
replaced "dense-q4.bin planted as a link to a bystander" m/dense-q4.bin -- $(infer) --output c3.jsonl --quantize-dense q4
untouched "the model's caches"
check "the runs through replaced caches give tokens" bash -c "[ \$(grep -c output_tokens c1.jsonl) -eq 3 ] && [ \$(grep -c output_tokens c3.jsonl) -eq 3 ]"

# 4. The L2 directory: private, its blob never written through, its index replaced.
SLOT=$(expert_slot_bytes m)
l2run() { echo $(infer) --l1-bytes $((SLOT * 3)) --l2-dir "$1"; }
mkdir -m 700 l2 l2/rank-0
ln -sf ../../m/experts-00000.h5 l2/rank-0/experts.blob
refuse "--l2-dir: experts.blob planted as a link to a shard" "experts.blob: is a symbolic link" 2 -- $(l2run l2) --output l.jsonl
rm l2/rank-0/experts.blob
ln -sf ../../m/model.h5 l2/rank-0/index.json
replaced "--l2-dir: index.json planted as a link to model.h5" l2/rank-0/index.json -- $(l2run l2) --output l.jsonl
check "--l2-dir: the run wrote its entries to its own blob" test -s l2/rank-0/experts.blob
mkdir -m 777 l2-open
refuse "--l2-dir writable by others" "l2-open: is writable by group or others" 4 -- $(l2run l2-open) --output l.jsonl
refuse "--l2-dir equal to --output" "is the --l2-dir directory" 2 -- $(l2run l2-same) --output l2-same
check "--l2-dir equal to --output: nothing was created" bash -c "[ ! -e l2-same ] && [ ! -e l2-same.lock ]"
untouched "L2"

# 5. convert and synth: a link where their files go (into the checkpoint read) is replaced.
"$PY" "$(dirname "$0")/make_hf_checkpoint.py" hf > /dev/null
TARGETS="$TARGETS $(echo hf/*)"
sums > before.sums
mkdir conv
ln -sf ../hf/config.json conv/model.h5
ln -sf ../hf/model.safetensors conv/experts-00000.h5
replaced "convert: model.h5 and a shard planted as links into the checkpoint" conv/model.h5 -- convert --from hf --out conv --quiet
check "convert: the shard link replaced too" bash -c "[ -f conv/experts-00000.h5 ] && [ ! -L conv/experts-00000.h5 ]"
refuse "convert --out the checkpoint itself" "is the --from checkpoint directory" 2 -- convert --from hf --out hf --quiet
mkdir syn
ln -sf ../victim syn/model.h5
replaced "synth: model.h5 planted as a link to a bystander" syn/model.h5 -- synth --out syn --layers 1 --experts 4 --top-k 2 --hidden 32 \
  --heads 2 --kv-heads 1 --head-dim 16 --intermediate 32 --vocab 64 --quiet
untouched "convert and synth"

# 5b. convert --out s3:// makes the model in a staging directory first: links planted there are
# replaced too, and the model uploaded is the one converted.
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export MOERUN_OBJECTSTORE_DIR=$WORK/objectstore MOERUN_S3_PORT=${MOERUN_S3_PORT:-18093}
trap '"$ROOT/cluster/objectstore/stop.sh" > /dev/null 2>&1; rm -rf "$WORK"' EXIT
if eval "$("$ROOT/cluster/objectstore/start.sh" --bucket moerun-links)"; then
  mkdir -m 700 stg
  ln -sf ../victim stg/model.h5
  ln -sf ../hf/model.safetensors stg/experts-00000.h5
  replaced "convert --out s3:// --staging: model.h5 and a shard planted as links" stg/model.h5 -- \
    convert --from hf --out s3://moerun-links/conv --staging stg --quiet
  "$MOERUN" infer --model s3://moerun-links/conv --input R --output up.jsonl --quiet 2> err || true
  "$MOERUN" infer --model conv --input R --output local.jsonl --quiet
  check "convert --out s3://: the uploaded model gives the local conversion's tokens" cmp -s up.jsonl local.jsonl
  untouched "convert's staging"
  "$ROOT/cluster/objectstore/stop.sh" > /dev/null 2>&1
else
  bad "the object store (cluster/objectstore/start.sh) did not start"
fi

# 6. Two runs sharing one L2 directory: the second reads it and adds nothing; no refetch warnings.
# (Longer runs, so that they overlap; with --io-threads 1 the writer's puts are spread out.)
requests R2 8 24
l2run() { echo infer --model m --input R2 --l1-bytes $((SLOT * 3)) --io-threads 1 --l2-dir "$1"; }
mkdir -m 700 l2s
"$MOERUN" $(l2run l2s) --output s0.jsonl 2> s0.err
size0=$(stat -c %s l2s/rank-0/experts.blob)
rm -rf l2s && mkdir -m 700 l2s
"$MOERUN" $(l2run l2s) --output s1.jsonl 2> s1.err &
p1=$!
"$MOERUN" $(l2run l2s) --output s2.jsonl 2> s2.err &
p2=$!
rc1=0; rc2=0
wait $p1 || rc1=$?
wait $p2 || rc2=$?
check "two runs sharing --l2-dir: both complete with the same tokens (exit $rc1, $rc2)" \
  bash -c "[ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && cmp -s s1.jsonl s0.jsonl && cmp -s s2.jsonl s0.jsonl"
check "two runs sharing --l2-dir: no corrupt-entry warnings ($(cat s1.err s2.err | grep -c 'in use by another run') run(s) found it in use)" \
  bash -c "! grep -q 'refetching' s1.err s2.err"
size=$(stat -c %s l2s/rank-0/experts.blob)
check "two runs sharing --l2-dir: the blob holds each expert once ($size bytes, $size0 for one run)" test "$size" -le "$size0"
finish

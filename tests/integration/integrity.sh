#!/bin/bash
# Integrity and safety (issue 21), each case as a user would meet it: weights that changed or do
# not belong together are refused by name; a second run on the same output is refused while the
# first is untouched; a pipe as --input works under mpirun; outputs respect the umask; nothing in
# the working directory runs as the tokenizer; a staging directory someone else owns is not
# trusted; a full disk ends with exit 4 naming the file and no file under its final name; a rank
# stopped during set-up ends the job naming it; FIFOs, directories and odd option values are
# refused at once. Each: the documented exit code, one error line, no hang.
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
synth_model "$WORK/m"
SYNTH_SEED=2 synth_model "$WORK/m2"
requests "$WORK/reqs.jsonl" 12 6
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet

# expect NAME CODE PATTERN -- moerun args...: exit code, exactly one line on stderr matching, no out.jsonl
expect() {
  local name=$1 code=$2 pattern=$3; shift 4
  rm -f "$WORK/out.jsonl"
  local rc=0
  timeout 120 "$MOERUN" "$@" 2> "$WORK/err" > /dev/null || rc=$?
  local lines; lines=$(grep -c . "$WORK/err" || true)
  check "$name (exit $rc, want $code: $(head -c 300 "$WORK/err"))" \
    bash -c "[ $rc -eq $code ] && grep -q -- \"\$1\" '$WORK/err' && [ $lines -eq 1 ] && [ ! -e '$WORK/out.jsonl' ]" _ "$pattern"
}
infer=(infer --input "$WORK/reqs.jsonl" --output "$WORK/out.jsonl" --quiet)
flip_bytes() {  # flip_bytes FILE DATASET: inverts one byte of a dataset's stored data, in place
  "$PY" - "$@" <<'PY'
import sys, h5py
path, name = sys.argv[1:3]
with h5py.File(path, "r") as f:
    off = f[name].id.get_offset()
with open(path, "r+b") as f:
    f.seek(off + 5); b = f.read(1); f.seek(off + 5); f.write(bytes([b[0] ^ 0x10]))
PY
}

# --- Weights that changed or do not belong together ---------------------------------------------
cp -r "$WORK/m" "$WORK/flip" && flip_bytes "$WORK/flip/model.h5" /layers/0/wk
expect "one flipped byte in model.h5's /layers/0/wk" 3 "model.h5: /layers/0/wk checksum mismatch" -- \
  "${infer[@]}" --model "$WORK/flip"
mkdir "$WORK/mixed" && cp "$WORK/m/model.h5" "$WORK/m/experts-00000.h5" "$WORK/mixed/" && cp "$WORK/m2/experts-00001.h5" "$WORK/mixed/"
expect "model.h5 with one shard of another model (synth --seed 2)" 3 "mixed/experts-00001.h5: is not the shard .*model.h5 was written with" -- \
  "${infer[@]}" --model "$WORK/mixed"
mkdir "$WORK/mixed2" && cp "$WORK/m/model.h5" "$WORK/mixed2/" && cp "$WORK/m2"/experts-*.h5 "$WORK/mixed2/"
expect "model.h5 with all shards of another model" 3 "mixed2/experts-00000.h5: is not the shard" -- "${infer[@]}" --model "$WORK/mixed2"
rc=0; $MPI -np 3 "$MOERUN" "${infer[@]}" --model "$WORK/mixed2" 2> "$WORK/err" || rc=$?
check "... under mpirun -np 3: exit $rc, the expert rank names it" bash -c "[ $rc -eq 3 ] && grep -q 'is not the shard' '$WORK/err' && [ ! -e '$WORK/out.jsonl' ]"
cp -r "$WORK/m" "$WORK/extra" && cp "$WORK/m2/experts-00001.h5" "$WORK/extra/experts-00002.h5"
"$PY" - "$WORK/extra/experts-00002.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    del f["layers"]  # an empty shard left from another model: no expert twice, but not this model's
PY
expect "a shard model.h5 does not record" 3 "has 3 expert shard(s).*records 2" -- "${infer[@]}" --model "$WORK/extra"

# convert: a checkpoint whose weights changed in place (same names, shapes, offsets, mtime) is
# converted again, not "kept".
"$PY" "$(dirname "$0")/make_hf_checkpoint.py" "$WORK/hf" > /dev/null
"$MOERUN" convert --from-hf "$WORK/hf" --out "$WORK/conv" --quiet 2> /dev/null
"$MOERUN" infer --model "$WORK/conv" "${infer[@]:1:2}" --output "$WORK/conv1.jsonl" --quiet --logits-out "$WORK/conv1.logits"
cp -p "$WORK/hf/model.safetensors" "$WORK/hf.orig"
"$PY" - "$WORK/hf/model.safetensors" <<'PY'
import sys, json, struct
p = sys.argv[1]
with open(p, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
    t = h["model.layers.0.self_attn.q_proj.weight"]
    f.seek(8 + n + t["data_offsets"][0]); b = bytearray(f.read(64)); b = bytes(x ^ 0x01 for x in b)
    f.seek(8 + n + t["data_offsets"][0]); f.write(b)
PY
touch -r "$WORK/hf.orig" "$WORK/hf/model.safetensors"  # the same mtime: only the content changed
"$MOERUN" convert --from-hf "$WORK/hf" --out "$WORK/conv" 2> "$WORK/conv2.err"
"$MOERUN" infer --model "$WORK/conv" "${infer[@]:1:2}" --output "$WORK/conv2.jsonl" --quiet --logits-out "$WORK/conv2.logits"
check "convert after the weights changed in place: files written again, logits differ ($(grep -m1 'written' "$WORK/conv2.err"))" \
  bash -c "! grep -q '0 file(s) written' '$WORK/conv2.err' && ! cmp -s '$WORK/conv1.logits' '$WORK/conv2.logits'"
"$MOERUN" convert --from-hf "$WORK/hf" --out "$WORK/conv" 2> "$WORK/conv3.err"
check "... and a rerun on the unchanged checkpoint keeps them ($(grep -m1 'written' "$WORK/conv3.err"))" grep -q '0 file(s) written' "$WORK/conv3.err"
cp -r "$WORK/hf" "$WORK/hfdir" && rm "$WORK/hfdir/config.json" && mkdir "$WORK/hfdir/config.json"
expect "convert: config.json is a directory" 3 "config.json: is a directory" -- convert --from-hf "$WORK/hfdir" --out "$WORK/c2"
cp -r "$WORK/hf" "$WORK/hfbig"
"$PY" - "$WORK/hfbig/config.json" <<'PY'
import sys, json
c = json.load(open(sys.argv[1])); c["num_hidden_layers"] = 2**64 - 1; json.dump(c, open(sys.argv[1], "w"))
PY
expect "convert: num_hidden_layers 2^64-1" 3 "field num_hidden_layers is 18446744073709551615, too large" -- \
  convert --from-hf "$WORK/hfbig" --out "$WORK/c3"
mkdir "$WORK/hffifo" && cp "$WORK/hf/config.json" "$WORK/hffifo/" && mkfifo "$WORK/hffifo/model.safetensors"
expect "convert: model.safetensors is a FIFO" 3 "model.safetensors: is a FIFO" -- convert --from-hf "$WORK/hffifo" --out "$WORK/c4"

# --- One writer per output -----------------------------------------------------------------------
# The first run reads its requests from a FIFO, so it is certainly still running (holding its
# output) when the second starts.
requests "$WORK/long.jsonl" 60 8
rm -f "$WORK/lockfifo" && mkfifo "$WORK/lockfifo"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/lockfifo" --output "$WORK/same.jsonl" --quiet &
first=$!
for _ in $(seq 1 1000); do [ -e "$WORK/same.jsonl.lock" ] && break; sleep 0.01; done
rc=0; timeout 60 "$MOERUN" infer --model "$WORK/m" --input "$WORK/long.jsonl" --output "$WORK/same.jsonl" --quiet 2> "$WORK/second.err" || rc=$?
cat "$WORK/long.jsonl" > "$WORK/lockfifo"
rc1=0; wait $first || rc1=$?
check "a second run on the same --output: exit $rc at once naming the holder ($(cat "$WORK/second.err"))" \
  bash -c "[ $rc -eq 2 ] && grep -q 'is being written by another run (pid $first' '$WORK/second.err'"
check "... and the first finishes untouched: exit $rc1, every result, no lock left" \
  bash -c "[ $rc1 -eq 0 ] && [ \$(wc -l < '$WORK/same.jsonl') -eq 60 ] && [ ! -e '$WORK/same.jsonl.lock' ]"

# --- A pipe as --input under mpirun --------------------------------------------------------------
fifo_ok=0
for i in 1 2 3; do
  rm -f "$WORK/fifo" "$WORK/fifo.jsonl" && mkfifo "$WORK/fifo"
  (sleep 1; cat "$WORK/reqs.jsonl" > "$WORK/fifo") &
  timeout 60 $MPI -np 4 "$MOERUN" infer --model "$WORK/m" --input "$WORK/fifo" --output "$WORK/fifo.jsonl" --quiet 2> /dev/null &&
    cmp -s "$WORK/ref.jsonl" "$WORK/fifo.jsonl" && fifo_ok=$((fifo_ok + 1))
done
check "a FIFO as --input under mpirun -np 4: every result, $fifo_ok of 3 runs" test $fifo_ok -eq 3

# --- Files as their owner made them --------------------------------------------------------------
(umask 077; "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/u.jsonl" --quiet --stats-json "$WORK/u.stats")
check "under umask 077 the results and --stats-json are 0600 ($(stat -c %a "$WORK/u.jsonl") $(stat -c %a "$WORK/u.stats"))" \
  bash -c "[ \$(stat -c %a '$WORK/u.jsonl') = 600 ] && [ \$(stat -c %a '$WORK/u.stats') = 600 ]"
chmod 0640 "$WORK/u.jsonl"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/u.jsonl" --quiet
check "a replaced 0640 output keeps its mode ($(stat -c %a "$WORK/u.jsonl"))" test "$(stat -c %a "$WORK/u.jsonl")" = 640
(umask 027; "$MOERUN" synth --out "$WORK/um" --layers 1 --experts 2 --top-k 1 --hidden 32 --heads 2 --kv-heads 1 --head-dim 16 \
  --intermediate 32 --vocab 64 --max-position 64 --quiet)
check "synth under umask 027: model files 0640 ($(stat -c %a "$WORK/um/model.h5"))" test "$(stat -c %a "$WORK/um/model.h5")" = 640

# --- No code from the working directory ----------------------------------------------------------
cp -r "$WORK/m" "$WORK/tm"
"$PY" - "$WORK/tm/tokenizer.json" <<'PY'
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
t = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 5, "world": 7}, unk_token="[UNK]"))
t.pre_tokenizer = pre_tokenizers.Whitespace()
t.save(sys.argv[1])
PY
for mod in json tokenizers sys_config; do
  echo "open('$WORK/pwned-$mod', 'w').write('ran')" > "$WORK/tm/$mod.py"
done
echo '{"id": "t", "prompt": "hello world", "max_new_tokens": 2}' > "$WORK/text.jsonl"
rc=0; (cd "$WORK/tm" && MOERUN_PYTHON="$PY" "$MOERUN" infer --model . --input "$WORK/text.jsonl" --output "$WORK/text-out.jsonl" --quiet) 2> "$WORK/tok.err" || rc=$?
check "text prompts from inside a directory holding json.py and tokenizers.py: exit $rc, neither ran" \
  bash -c "[ $rc -eq 0 ] && grep -q '\"text\"' '$WORK/text-out.jsonl' && ! ls '$WORK'/pwned-* 2>/dev/null"

# --- Staging directories: trusted only when they are ours alone ----------------------------------
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test-secret AWS_ENDPOINT_URL=http://127.0.0.1:9
mkdir -p "$WORK/tmp" && mkdir "$WORK/tmp/moerun-$(id -u)" && chmod 0777 "$WORK/tmp/moerun-$(id -u)"
TMPDIR="$WORK/tmp" expect "convert --out s3://: a world-writable moerun-UID in TMPDIR" 4 "moerun-$(id -u): is writable by group or others (mode 0777)" -- \
  convert --from-hf "$WORK/hf" --out s3://bkt/conv --quiet
chmod 0700 "$WORK/tmp/moerun-$(id -u)" && chown nobody "$WORK/tmp/moerun-$(id -u)"
TMPDIR="$WORK/tmp" expect "... one owned by another user" 4 "is owned by uid $(id -u nobody), not by this user" -- \
  convert --from-hf "$WORK/hf" --out s3://bkt/conv --quiet
mkdir "$WORK/open-staging" && chmod 0777 "$WORK/open-staging"
expect "... --staging writable by others" 4 "--staging .*open-staging: is writable by group or others" -- \
  convert --from-hf "$WORK/hf" --out s3://bkt/conv --staging "$WORK/open-staging" --quiet
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL

# --- A full disk: exit 4 naming the file, no crash, nothing under a final name ------------------
# RLIMIT_FSIZE with SIGXFSZ ignored makes writes past the limit fail with EFBIG, as a full disk does.
full() { (trap '' XFSZ; ulimit -f "$1"; shift; exec "$MOERUN" "$@"); }
for cmd in synth convert trace; do
  rm -rf "$WORK/full" && mkdir "$WORK/full"
  rc=0
  case $cmd in
    synth) full 100 synth --out "$WORK/full/m" --layers 3 --experts 8 --top-k 2 --hidden 64 --heads 4 --kv-heads 2 --head-dim 16 \
             --intermediate 96 --vocab 200 --max-position 256 --shards 2 --quiet 2> "$WORK/full.err" || rc=$?
           names="experts-00000.h5" ;;
    convert) full 100 convert --from-hf "$WORK/hf" --out "$WORK/full/m" --quiet 2> "$WORK/full.err" || rc=$?
             names="experts-00000.h5" ;;
    trace) requests "$WORK/many.jsonl" 200 120  # the trace outgrows the limit long before the journal
           # PMIx keeps its store in shared-memory files, which the file-size limit would hit first.
           PMIX_MCA_gds=hash full 300 infer --model "$WORK/m" --input "$WORK/many.jsonl" --output "$WORK/full/o.jsonl" --trace "$WORK/full/t.h5" --quiet \
             2> "$WORK/full.err" || rc=$?
           names="t.h5" ;;
  esac
  check "$cmd on a full disk: exit $rc, the file named, no file under its final name ($(head -c 200 "$WORK/full.err"))" \
    bash -c "[ $rc -eq 4 ] && grep -q '$names: writing failed' '$WORK/full.err' && [ ! -e '$WORK/full/m/model.h5' ] && [ ! -e '$WORK/full/t.h5' ] &&
             [ \$(grep -c . '$WORK/full.err') -eq 1 ]"
done

# --- A rank stopped during set-up ends the job, naming it -----------------------------------------
# Rank 0 reads the requests from a FIFO, so every other rank is certainly waiting in set-up when
# rank 2 is stopped; the FIFO is then filled and the agreement that follows cannot complete.
rank_pid() {
  for p in $(pgrep -f "moerun infer --model $WORK/m --input $WORK/sfifo"); do
    if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then echo "$p"; return; fi
  done
}
rm -f "$WORK/sfifo" && mkfifo "$WORK/sfifo"
$MPI -np 3 "$MOERUN" infer --model "$WORK/m" --input "$WORK/sfifo" --output "$WORK/stall.jsonl" --quiet --comm-timeout 4 \
  > /dev/null 2> "$WORK/setup.err" &
job=$!
victim="" reader=""
for _ in $(seq 1 1500); do  # until rank 0 waits for the FIFO's writer (every rank is past MPI_Init then)
  [ -z "$reader" ] && reader=$(rank_pid 0)
  [ -n "$reader" ] && grep -q wait_for_partner /proc/$reader/wchan 2>/dev/null && break
  sleep 0.02
done
victim=$(rank_pid 2)
kill -STOP "$victim"
cat "$WORK/reqs.jsonl" > "$WORK/sfifo"
start=$(date +%s)
rc=0; timeout 90 tail --pid=$job -f /dev/null; wait $job || rc=$?
took=$(( $(date +%s) - start ))
kill -CONT "$victim" 2>/dev/null || true
check "rank 2 stopped during set-up: exit $rc after ${took}s, one line naming it ($(grep -m1 error "$WORK/setup.err"))" \
  bash -c "[ $rc -eq 5 ] && [ $took -le 30 ] && grep -q 'waiting for rank(s) 2' '$WORK/setup.err' &&
           [ \$(grep -c 'moerun: error' '$WORK/setup.err') -eq 1 ]"

# --- FIFOs, directories and odd values, refused at once ------------------------------------------
rm -f "$WORK/ctl" && mkfifo "$WORK/ctl"
expect "--swap-control is a FIFO" 2 "ctl: is a FIFO, expected a regular file" -- "${infer[@]}" --model "$WORK/m" --swap-control "$WORK/ctl"
cp -r "$WORK/m" "$WORK/fifoshard" && mkfifo "$WORK/fifoshard/experts-00002.h5"
expect "a FIFO named experts-00002.h5 in the model" 3 "experts-00002.h5: is a FIFO, expected a regular file" -- "${infer[@]}" --model "$WORK/fifoshard"
expect "--temperature inf" 2 "--temperature must be a finite number >= 0" -- "${infer[@]}" --model "$WORK/m" --temperature inf
mkdir "$WORK/cfgdir"
expect "--input names a directory" 2 "--input .*cfgdir: is a directory, expected a file of JSON lines" -- \
  infer --model "$WORK/m" --input "$WORK/cfgdir" --output "$WORK/out.jsonl" --quiet
expect "--config names a directory" 2 "cfgdir: is a directory, expected a regular file" -- "${infer[@]}" --model "$WORK/m" --config "$WORK/cfgdir"
long="$WORK/$(printf 'o%.0s' $(seq 1 246))"
expect "a 246-character --output name: refused before the run" 4 "cannot create a temporary file next to it: File name too long" -- \
  infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$long" --quiet
expect "... with --resume too" 4 "File name too long" -- infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$long" --quiet --resume
cp -r "$WORK/m" "$WORK/theta"
"$PY" -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); f.attrs["rope_theta"] = float("inf")' "$WORK/theta/model.h5"
expect "model attribute rope_theta = inf" 3 "attribute rope_theta is inf, expected a finite number > 0" -- "${infer[@]}" --model "$WORK/theta"
for v in 1e30 inf; do
  expect "--l1-bytes $v" 2 "--l1-bytes: \"$v\" is too large" -- "${infer[@]}" --model "$WORK/m" --l1-bytes $v
done
printf '{"id": "a", "prompt_tokens": [1, 2]}\0garbage\n' > "$WORK/nul.jsonl"
expect "a request line with a NUL byte and more after it" 3 "nul.jsonl: line 1: contains a NUL byte at column 37" -- \
  infer --model "$WORK/m" --input "$WORK/nul.jsonl" --output "$WORK/out.jsonl" --quiet
finish

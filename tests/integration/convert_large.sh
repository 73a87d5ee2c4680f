#!/bin/bash
# Bounded memory: a Mixtral-shaped safetensors checkpoint of about 1.4 GiB converts under an
# address-space limit of 512 MiB, smaller than the checkpoint (tensors are read one at a time with
# pread, nothing is mapped). Then a conversion killed part-way is finished by a rerun, which keeps
# the shards already written (with --quantize-dense, making the dense cache too), and the model
# infers; its first start with --quantize-dense reads that cache.
source "$(dirname "$0")/common.sh"
HF=$WORK/hf
mkdir -p "$HF"
# The checkpoint, streamed to disk tensor by tensor.
"$PY" "$(dirname "$0")/make_hf_checkpoint.py" "$HF" --vocab 1024 --hidden 1024 --layers 4 --heads 8 --kv-heads 4 --head-dim 128 \
  --intermediate 3584 --experts 8
size=$(stat -c %s "$HF/model.safetensors")
limit=$((512 << 20))
check "the checkpoint ($((size >> 20)) MiB) is larger than the limit ($((limit >> 20)) MiB)" test "$size" -gt "$limit"

# Peak memory of the conversion under the limit, measured by the kernel.
"$PY" - "$MOERUN" "$HF" "$WORK/moe" "$limit" > "$WORK/peak" <<'EOF'
import resource, subprocess, sys
moerun, hf, out, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
r = subprocess.run([moerun, "convert", "--from-hf", hf, "--out", out, "--shards", "4"], preexec_fn=cap)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
EOF
read -r rc peak < "$WORK/peak"
check "convert under a ${limit}-byte address-space limit: exit $rc, peak RSS ${peak} MiB" bash -c "[ $rc -eq 0 ] && [ $peak -lt 512 ]"
check "four expert shards and model.h5 written" bash -c "[ \$(ls '$WORK/moe' | grep -c '^experts-0000[0-3].h5$') -eq 4 ] && [ -f '$WORK/moe/model.h5' ]"

# Killed part-way: the shards finished before the kill stay, the rest is made by the rerun.
"$MOERUN" convert --from-hf "$HF" --out "$WORK/moe2" --shards 4 --quiet &
pid=$!
for _ in $(seq 1 3000); do
  [ -f "$WORK/moe2/experts-00001.h5" ] && break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
check "killed before the end: no model.h5 yet" test ! -e "$WORK/moe2/model.h5"
"$MOERUN" convert --from-hf "$HF" --out "$WORK/moe2" --shards 4 --quantize-dense q4 2> "$WORK/rerun.log"
check "the rerun keeps the finished shards ($(tail -1 "$WORK/rerun.log" | grep -o '[0-9]* file(s) written, [0-9]* kept'))" \
  bash -c "grep -q 'kept from an earlier run' '$WORK/rerun.log' && ! grep -q ', 0 kept' '$WORK/rerun.log'"
check "no temporary files left" bash -c "! ls '$WORK/moe2' | grep -q tmp"
echo '{"id": "a", "prompt_tokens": [1, 7, 9], "max_new_tokens": 2}' > "$WORK/r.jsonl"
index_inode=$(stat -c %i "$WORK/moe/experts-index.bin" 2>/dev/null || echo none)
"$MOERUN" infer --model "$WORK/moe" --input "$WORK/r.jsonl" --output "$WORK/a.jsonl" --quiet
# Kept by convert and used as it is by the first start (rewritten, it would have a new inode).
check "convert kept the expert index, and the first infer used it unchanged" \
  bash -c "[ '$index_inode' != none ] && [ \$(stat -c %i '$WORK/moe/experts-index.bin') = '$index_inode' ]"
"$MOERUN" infer --model "$WORK/moe2" --input "$WORK/r.jsonl" --output "$WORK/b.jsonl" --quiet
check "the resumed conversion infers like the uninterrupted one" cmp -s "$WORK/a.jsonl" "$WORK/b.jsonl"
# --quantize-dense at convert: the dense cache is there, and the first `infer --quantize-dense`
# uses it (no quantizing at load) and gives what quantizing at load gives.
MOERUN_LOG=info "$MOERUN" infer --model "$WORK/moe" --input "$WORK/r.jsonl" --output "$WORK/qa.jsonl" --quantize-dense q4 2> "$WORK/qa.err"
MOERUN_LOG=info "$MOERUN" infer --model "$WORK/moe2" --input "$WORK/r.jsonl" --output "$WORK/qb.jsonl" --quantize-dense q4 2> "$WORK/qb.err"
check "convert --quantize-dense q4 made dense-q4.bin; the first infer read it: $(grep -o '[0-9]* dense matrices quantized to q4[^,]*' "$WORK/rerun.log")" \
  bash -c "[ -f '$WORK/moe2/dense-q4.bin' ] && grep -q 'quantized at load' '$WORK/qa.err' && ! grep -q 'quantized at load' '$WORK/qb.err' && cmp -s '$WORK/qa.jsonl' '$WORK/qb.jsonl'"
finish

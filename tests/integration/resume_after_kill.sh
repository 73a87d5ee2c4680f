#!/bin/bash
# SIGKILL mid-run, then --resume: the final file has every id exactly once and equals an
# uninterrupted run; requests finished before the kill are not run again. The same for DeepSeek
# Sparse Attention, whose journal is refused for a model with other indexer weights.
source "$(dirname "$0")/common.sh"
SYNTH_HIDDEN=256 SYNTH_HEAD_DIM=64 SYNTH_FF=512 synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 40 24
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/full.jsonl" --quiet --max-batch-size 2

kill_after_journal "$WORK/out.jsonl" 5 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/out.jsonl" --quiet --max-batch-size 2
before=$(wc -l < "$WORK/out.jsonl.journal")
check "killed before the end: journal has results, no final file" bash -c "[ $before -ge 5 ] && [ $before -lt 40 ] && [ ! -e '$WORK/out.jsonl' ]"
cp "$WORK/out.jsonl.journal" "$WORK/killed.journal"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/out.jsonl" --max-batch-size 2 --resume 2> "$WORK/resume.log"
check "resume reports the finished requests it skips" grep -q "resume: $before finished request" "$WORK/resume.log"
check "resumed output equals the uninterrupted run" cmp -s "$WORK/full.jsonl" "$WORK/out.jsonl"
check "every id exactly once" bash -c "[ \$(grep -o '\"id\":\"[^\"]*\"' '$WORK/out.jsonl' | sort | uniq -d | wc -l) -eq 0 ] && [ \$(wc -l < '$WORK/out.jsonl') -eq 40 ]"
check "the output carries no journal keys" bash -c "! grep -q '\"key\"' '$WORK/out.jsonl'"

# The killed run's journal, offered to a run that differs: each journaled result carries the key of
# its request, model and routing options, so none of them may end up in the other run's output.
# resume_other NAME FULL_OUTPUT -- infer args...: resumes from the killed journal, compares.
resume_other() {
  local name=$1 full=$2; shift 3
  rm -f "$WORK/other.jsonl"
  cp "$WORK/killed.journal" "$WORK/other.jsonl.journal"
  "$MOERUN" infer "$@" --output "$WORK/other.jsonl" --max-batch-size 2 --resume 2> "$WORK/other.log"
  check "$name: the stale journal is recomputed with a warning and the output equals a fresh run" \
    bash -c "grep -q 'journaled result(s) were made for other requests' '$WORK/other.log' && cmp -s '$full' '$WORK/other.jsonl'"
}
# Same ids, other prompts.
sed 's/"prompt_tokens": \[1, /"prompt_tokens": [2, /' "$WORK/reqs.jsonl" > "$WORK/reqs2.jsonl"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs2.jsonl" --output "$WORK/full2.jsonl" --quiet --max-batch-size 2
check "the second input gives other tokens (so the check below can fail)" bash -c "! cmp -s '$WORK/full.jsonl' '$WORK/full2.jsonl'"
resume_other "other input, same ids" "$WORK/full2.jsonl" -- --model "$WORK/m" --input "$WORK/reqs2.jsonl"
# Other routing options.
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/full-t.jsonl" --quiet --max-batch-size 2 --router-temperature 0.3
resume_other "other routing options" "$WORK/full-t.jsonl" -- --model "$WORK/m" --input "$WORK/reqs.jsonl" --router-temperature 0.3
# The same model with its LM head and attention quantized at load.
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/full-q8.jsonl" --quiet --max-batch-size 2 --quantize-dense q8
check "--quantize-dense q8 gives other tokens (so the check below can fail)" bash -c "! cmp -s '$WORK/full.jsonl' '$WORK/full-q8.jsonl'"
resume_other "quantized dense layers" "$WORK/full-q8.jsonl" -- --model "$WORK/m" --input "$WORK/reqs.jsonl" --quantize-dense q8
# Another model with the same shapes (another seed).
SYNTH_SEED=12 SYNTH_HIDDEN=256 SYNTH_HEAD_DIM=64 SYNTH_FF=512 synth_model "$WORK/m2"
"$MOERUN" infer --model "$WORK/m2" --input "$WORK/reqs.jsonl" --output "$WORK/full-m2.jsonl" --quiet --max-batch-size 2
resume_other "another model" "$WORK/full-m2.jsonl" -- --model "$WORK/m2" --input "$WORK/reqs.jsonl"

# DeepSeek Sparse Attention (deepseek_v32; index_topk 8, so the longer prompts choose): killed and
# resumed, the output equals an uninterrupted run. Then a journal made with other indexer weights
# only: the run key hashes every layer tensor (MLA's and the indexer's too), so it is recomputed.
SYNTH_LAYERS=2 synth_model "$WORK/dsa" --family deepseek_v32
"$MOERUN" infer --model "$WORK/dsa" --input "$WORK/reqs.jsonl" --output "$WORK/full-dsa.jsonl" --quiet --max-batch-size 2
kill_after_journal "$WORK/dsa.jsonl" 5 "$MOERUN" infer --model "$WORK/dsa" --input "$WORK/reqs.jsonl" --output "$WORK/dsa.jsonl" --quiet --max-batch-size 2
check "deepseek_v32: killed before the end" bash -c "[ ! -e '$WORK/dsa.jsonl' ] && [ \$(wc -l < '$WORK/dsa.jsonl.journal') -ge 5 ]"
cp "$WORK/dsa.jsonl.journal" "$WORK/dsa-killed.journal"
"$MOERUN" infer --model "$WORK/dsa" --input "$WORK/reqs.jsonl" --output "$WORK/dsa.jsonl" --quiet --max-batch-size 2 --resume
check "deepseek_v32: resumed output equals the uninterrupted run" cmp -s "$WORK/full-dsa.jsonl" "$WORK/dsa.jsonl"
cp -r "$WORK/dsa" "$WORK/dsa-idx"
"$PY" - "$WORK/dsa-idx/model.h5" <<'PY'
import h5py, sys, numpy as np, xxhash
with h5py.File(sys.argv[1], "r+") as f:
    for l in range(2):
        d = f[f"layers/{l}/indexer/wk"]
        a = d[...]
        a = (a ^ np.uint16(0x8000)) if a.dtype == np.uint16 else -a  # other keys (bf16 bits: the sign), other choices
        d[...] = a
        d.attrs["xxh64"] = np.uint64(xxhash.xxh64(a.tobytes(), seed=0).intdigest())  # a consistent file
PY
"$MOERUN" infer --model "$WORK/dsa-idx" --input "$WORK/reqs.jsonl" --output "$WORK/full-dsa-idx.jsonl" --quiet --max-batch-size 2
check "other indexer weights give other tokens (so the check below can fail)" bash -c "! cmp -s '$WORK/full-dsa.jsonl' '$WORK/full-dsa-idx.jsonl'"
cp "$WORK/dsa-killed.journal" "$WORK/dsa-idx.jsonl.journal"
"$MOERUN" infer --model "$WORK/dsa-idx" --input "$WORK/reqs.jsonl" --output "$WORK/dsa-idx.jsonl" --max-batch-size 2 --resume 2> "$WORK/dsa-idx.log"
check "other indexer weights: the stale journal is recomputed with a warning and the output equals a fresh run" \
  bash -c "grep -q 'journaled result(s) were made for other requests' '$WORK/dsa-idx.log' && cmp -s '$WORK/full-dsa-idx.jsonl' '$WORK/dsa-idx.jsonl'"
finish

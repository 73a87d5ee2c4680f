#!/bin/bash
# SIGKILL mid-run, then --resume: the final file has every id exactly once and equals an
# uninterrupted run; requests finished before the kill are not run again.
source "$(dirname "$0")/common.sh"
SYNTH_HIDDEN=256 SYNTH_HEAD_DIM=64 SYNTH_FF=512 synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 40 24
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/full.jsonl" --quiet --max-batch-size 2

"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/out.jsonl" --quiet --max-batch-size 2 &
pid=$!
for _ in $(seq 1 600); do
  [ -s "$WORK/out.jsonl.journal" ] && [ "$(wc -l < "$WORK/out.jsonl.journal")" -ge 5 ] && break
  sleep 0.02
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
before=$(wc -l < "$WORK/out.jsonl.journal")
check "killed before the end: journal has results, no final file" bash -c "[ $before -ge 5 ] && [ $before -lt 40 ] && [ ! -e '$WORK/out.jsonl' ]"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/out.jsonl" --max-batch-size 2 --resume 2> "$WORK/resume.log"
check "resume reports the finished requests it skips" grep -q "resume: $before finished request" "$WORK/resume.log"
check "resumed output equals the uninterrupted run" cmp -s "$WORK/full.jsonl" "$WORK/out.jsonl"
check "every id exactly once" bash -c "[ \$(grep -o '\"id\":\"[^\"]*\"' '$WORK/out.jsonl' | sort | uniq -d | wc -l) -eq 0 ] && [ \$(wc -l < '$WORK/out.jsonl') -eq 40 ]"
finish

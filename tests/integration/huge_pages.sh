#!/bin/bash
# --huge-pages: the weights in 2 MiB pages change no result bit, in one process or with expert
# ranks; auto turns them on only for a job of at least 2048 decode steps; a bad value is a usage
# error naming the option. (That the pages really are huge: test_huge_page_pool, from smaps.)
source "$(dirname "$0")/common.sh"
MPI="${MPIEXEC:-mpirun} --oversubscribe --bind-to none"
synth_model "$WORK/m"
requests "$WORK/short.jsonl" 4 6
huge() { "$PY" -c "import json, sys; print(json.load(open(sys.argv[1]))['huge_pages'])" "$1"; }

for hp in on off auto; do
  "$MOERUN" infer --model "$WORK/m" --input "$WORK/short.jsonl" --output "$WORK/$hp.jsonl" --stats-json "$WORK/$hp.stats" \
    --logits-out "$WORK/$hp.logits" --huge-pages "$hp" --quiet
done
check "--huge-pages on: the weights in huge pages (stats)" [ "$(huge "$WORK/on.stats")" = True ]
check "--huge-pages off: not" [ "$(huge "$WORK/off.stats")" = False ]
check "--huge-pages auto, 4 requests of 6 tokens: not (a short job)" [ "$(huge "$WORK/auto.stats")" = False ]
check "on and off: the same tokens and log-probs" cmp -s "$WORK/on.jsonl" "$WORK/off.jsonl"
check "on and off: the same logits, bit for bit" same_logits "$WORK/on.logits" "$WORK/off.logits"

# 64 requests x 64 new tokens at 2 a step: 2048 decode steps.
requests "$WORK/long.jsonl" 64 64
"$MOERUN" infer --model "$WORK/m" --input "$WORK/long.jsonl" --output "$WORK/long-auto.jsonl" --stats-json "$WORK/long-auto.stats" \
  --max-batch-size 2 --quiet
"$MOERUN" infer --model "$WORK/m" --input "$WORK/long.jsonl" --output "$WORK/long-off.jsonl" --max-batch-size 2 --huge-pages off --quiet
check "--huge-pages auto, 2048 decode steps: on" [ "$(huge "$WORK/long-auto.stats")" = True ]
check "the long job: the same results as off" cmp -s "$WORK/long-auto.jsonl" "$WORK/long-off.jsonl"

# A router and two expert ranks, each placing its own weights.
$MPI -np 3 "$MOERUN" infer --model "$WORK/m" --input "$WORK/short.jsonl" --output "$WORK/np3.jsonl" --huge-pages on --quiet
check "np 3 with --huge-pages on: the one-process results" cmp -s "$WORK/np3.jsonl" "$WORK/off.jsonl"

set +e
msg=$("$MOERUN" infer --model "$WORK/m" --input "$WORK/short.jsonl" --output "$WORK/bad.jsonl" --huge-pages maybe 2>&1)
rc=$?
set -e
check "--huge-pages maybe: exit 2 naming the option ($msg)" [ "$rc" -eq 2 ] && [[ "$msg" == *"--huge-pages"* ]]
finish

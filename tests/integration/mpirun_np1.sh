#!/bin/bash
# The README's launch line: moerun infer under mpirun with one rank.
source "$(dirname "$0")/common.sh"
synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 4 6
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/direct.jsonl" --quiet
"${MPIEXEC:-mpirun}" --oversubscribe -np 1 "$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/mpi.jsonl" --quiet
check "mpirun -np 1 gives the same results as a direct run" cmp -s "$WORK/direct.jsonl" "$WORK/mpi.jsonl"
finish

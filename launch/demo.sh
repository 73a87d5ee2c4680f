#!/usr/bin/env bash
# The main job on a fresh machine: install missing packages, build moerun, make a small synthetic
# Mixtral-style model, run batch inference on it under mpirun, print the results and statistics.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
OUT=${MOERUN_DEMO_DIR:-$ROOT/out/demo}
NP=${MOERUN_DEMO_NP:-4}   # 1 router rank + 3 expert ranks
source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}"
mkdir -p "$BUILD"
moerun_build "$ROOT" "$BUILD" moerun
MOERUN=$BUILD/launch/moerun

mkdir -p "$OUT"
echo "== synth: 4 layers, 8 experts (top-2), hidden 256" >&2
"$MOERUN" synth --out "$OUT/model" --layers 4 --experts 8 --top-k 2 --hidden 256 --intermediate 512 \
  --heads 8 --kv-heads 4 --head-dim 32 --vocab 512 --shards 2 --seed 1 --quiet
"$MOERUN" inspect --model "$OUT/model" | head -12

: > "$OUT/requests.jsonl"
for i in $(seq 0 15); do
  echo "{\"id\": \"req-$i\", \"prompt_tokens\": [1, $((i * 7 % 500 + 3)), $((i * 13 % 500 + 3)), $((i * 29 % 500 + 3))], \"max_new_tokens\": 24}" >> "$OUT/requests.jsonl"
done
echo '{"id": "sampled", "prompt_tokens": [1, 42, 7], "max_new_tokens": 24, "temperature": 0.8, "seed": 7}' >> "$OUT/requests.jsonl"

echo "== mpirun -np $NP moerun infer" >&2
mpirun --oversubscribe --bind-to none -np "$NP" "$MOERUN" infer --model "$OUT/model" --input "$OUT/requests.jsonl" \
  --output "$OUT/results.jsonl" --stats-json "$OUT/stats.json" --trace "$OUT/trace.h5"
echo "== results ($OUT/results.jsonl)" >&2
head -5 "$OUT/results.jsonl"
echo "... $(wc -l < "$OUT/results.jsonl") results; statistics in $OUT/stats.json, routing trace in $OUT/trace.h5" >&2

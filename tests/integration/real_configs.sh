#!/bin/bash
# The published configurations of Qwen3-30B-A3B and gpt-oss-20b (config.json only, no weights;
# tests/data/hf_configs) through `inspect --hf-config`: the parameter counts their model cards give
# (30.5B total / 3.3B active; 20.9B / 3.6B active, which OpenAI counts without the embedding
# lookup), and memory per rank for 2 nodes x 8 ranks, gpt-oss's sliding layers' KV bounded.
source "$(dirname "$0")/common.sh"
CONFIGS="$(dirname "$0")/../data/hf_configs"

# billions FILE LINE_REGEX [N]: the Nth integer on the matching line, in billions cut (as model cards
# do: 3.35B is "3.3B") to one decimal.
billions() { grep -E "$2" "$1" | head -1 | awk -v f="${3:-1}" '{ for (i = 1; i <= NF; ++i) if ($i ~ /^[0-9]+$/) { n++; if (n == f) { printf "%.1f", int($i / 1e8) / 10; exit } } }'; }
expect_value() { if [ "$2" = "$3" ]; then ok "$1: $2"; else bad "$1: $2, expected $3"; fi; }

for m in qwen3-30b-a3b gpt-oss-20b; do
  "$MOERUN" inspect --hf-config "$CONFIGS/$m.json" --nodes 2 --ranks-per-node 8 > "$WORK/$m.txt" 2> "$WORK/$m.err" \
    || bad "$m: inspect exited $? ($(cat "$WORK/$m.err"))"
done
expect_value "Qwen3-30B-A3B total parameters (B)" "$(billions "$WORK/qwen3-30b-a3b.txt" '^  total ')" 30.5
expect_value "Qwen3-30B-A3B active per token (B)" "$(billions "$WORK/qwen3-30b-a3b.txt" 'active per token')" 3.3
expect_value "gpt-oss-20b total parameters (B)" "$(billions "$WORK/gpt-oss-20b.txt" '^  total ')" 20.9
expect_value "gpt-oss-20b active per token without the embedding lookup (B)" "$(billions "$WORK/gpt-oss-20b.txt" 'active per token' 2)" 3.6
for m in qwen3-30b-a3b gpt-oss-20b; do
  grep -q "layout: 2 node(s) x 8 rank(s), 2 router rank(s), 14 expert rank(s)" "$WORK/$m.txt" && grep -q "^expert rank holding" "$WORK/$m.txt" \
    && ok "$m: memory per rank for 2 nodes x 8 ranks: $(grep -A5 '^expert rank holding' "$WORK/$m.txt" | tail -1 | xargs)" \
    || bad "$m: no 2 x 8 layout in the report"
done
grep -q "qk_norm 2" "$WORK/qwen3-30b-a3b.txt" && ok "Qwen3: per-head q/k norms" || bad "Qwen3: qk_norm is not per head"
grep -q "sliding_window 128 (12 of 24 layers), rope yarn x32" "$WORK/gpt-oss-20b.txt" && ok "gpt-oss: 12 sliding layers, yarn x32" \
  || bad "gpt-oss: layer kinds or rope: $(grep sliding "$WORK/gpt-oss-20b.txt")"
grep -q "sliding layers hold at most 2 x 128 positions" "$WORK/gpt-oss-20b.txt" && ok "gpt-oss: the sliding layers' KV is bounded" \
  || bad "gpt-oss: KV not bounded: $(grep 'KV cache per token' "$WORK/gpt-oss-20b.txt")"
finish

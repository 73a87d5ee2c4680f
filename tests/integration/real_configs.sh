#!/bin/bash
# The published configurations of Qwen3-30B-A3B, gpt-oss-20b, DeepSeek-V3, DeepSeek-V2-Lite, GLM-4.5 and
# MiniMax-M2 (transformers' MiniMaxM2Config defaults, which are MiniMax-M2's, with MiniMax's own fields)
# (config.json only, no weights; tests/data/hf_configs) through `inspect --hf-config`: the parameter
# counts their model cards give (30.5B total / 3.3B active; 20.9B / 3.6B active, which OpenAI
# counts without the embedding lookup; 671B / 37B; 15.7B / 2.4B without the lookup), memory per
# rank for 2 nodes x 8 ranks (DeepSeek-V3: 4 x 8), gpt-oss's sliding layers' KV bounded, MLA's KV
# from its compressed cache, the experts in the form the checkpoints ship (MXFP4, fp8); GLM-4.5's
# and MiniMax-M2's counts against a hand derivation from the config (the cards' 355B and 230B count
# the MTP layers); Qwen3-Next-80B-A3B's likewise, with its recurrent state per sequence.
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
grep -q "experts mxfp4" "$WORK/gpt-oss-20b.txt" && ok "gpt-oss: experts planned in MXFP4, as shipped" || bad "gpt-oss: experts not MXFP4"

for m in deepseek-v3 deepseek-v2-lite; do
  "$MOERUN" inspect --hf-config "$CONFIGS/$m.json" --nodes 4 --ranks-per-node 8 > "$WORK/$m.txt" 2> "$WORK/$m.err" \
    || bad "$m: inspect exited $? ($(cat "$WORK/$m.err"))"
done
expect_value "DeepSeek-V3 total parameters (B, without the MTP layer)" "$(billions "$WORK/deepseek-v3.txt" '^  total ')" 671.0
expect_value "DeepSeek-V3 active per token (B)" "$(billions "$WORK/deepseek-v3.txt" 'active per token')" 37.5
expect_value "DeepSeek-V2-Lite total parameters (B)" "$(billions "$WORK/deepseek-v2-lite.txt" '^  total ')" 15.7
expect_value "DeepSeek-V2-Lite active per token without the embedding lookup (B)" "$(billions "$WORK/deepseek-v2-lite.txt" 'active per token' 2)" 2.4
# MLA's cache: kv_lora_rank 512 + qk_rope_head_dim 64 float32 values a token and layer.
expect_value "DeepSeek-V3 KV bytes per token (61 layers x 576 x 4)" "$(sed -n 's/^KV cache per token \([0-9]*\) bytes.*/\1/p' "$WORK/deepseek-v3.txt")" 140544
expect_value "DeepSeek-V2-Lite KV bytes per token (27 layers x 576 x 4)" "$(sed -n 's/^KV cache per token \([0-9]*\) bytes.*/\1/p' "$WORK/deepseek-v2-lite.txt")" 62208
grep -q "multi-head attention of these heads: 40960" "$WORK/deepseek-v3.txt" && ok "DeepSeek-V3: 576 cached values against 40,960 for multi-head attention" \
  || bad "DeepSeek-V3: no MLA line"
grep -q "experts fp8-block" "$WORK/deepseek-v3.txt" && ok "DeepSeek-V3: experts planned in fp8-block, as shipped" || bad "DeepSeek-V3: experts not fp8"
grep -q "layout: 4 node(s) x 8 rank(s), 4 router rank(s), 28 expert rank(s)" "$WORK/deepseek-v3.txt" \
  && ok "DeepSeek-V3: memory per rank for 4 nodes x 8 ranks: $(grep -A5 '^expert rank holding' "$WORK/deepseek-v3.txt" | tail -1 | xargs)" \
  || bad "DeepSeek-V3: no 4 x 8 layout"
grep -q "sliding_window 128 (12 of 24 layers), rope yarn x32" "$WORK/gpt-oss-20b.txt" && ok "gpt-oss: 12 sliding layers, yarn x32" \
  || bad "gpt-oss: layer kinds or rope: $(grep sliding "$WORK/gpt-oss-20b.txt")"
grep -q "sliding layers hold at most 2 x 128 positions" "$WORK/gpt-oss-20b.txt" && ok "gpt-oss: the sliding layers' KV is bounded" \
  || bad "gpt-oss: KV not bounded: $(grep 'KV cache per token' "$WORK/gpt-oss-20b.txt")"
# GLM-4.5: attention with q/k/v biases and per-head q/k norms, 3 dense layers, 89 MoE layers of 160
# experts + 1 shared (the correction bias a buffer, uncounted; the MTP layer not converted).
"$MOERUN" inspect --hf-config "$CONFIGS/glm-4.5.json" --nodes 4 --ranks-per-node 8 > "$WORK/glm.txt" 2> "$WORK/glm.err" \
  || bad "glm-4.5: inspect exited $? ($(cat "$WORK/glm.err"))"
want=$("$PY" -c '
V, D, L, H, KV, HD, DFF, FF, E, K, DENSE = 151552, 5120, 92, 96, 8, 128, 12288, 1536, 160, 8, 3
attn = D * H * HD + H * HD + 2 * (D * KV * HD + KV * HD) + H * HD * D + 2 * HD + 2 * D
expert = 3 * D * FF
fixed = 2 * V * D + D + L * attn + DENSE * 3 * D * DFF + (L - DENSE) * (expert + E * D)
print(fixed + (L - DENSE) * E * expert, fixed + (L - DENSE) * K * expert)')
expect_value "GLM-4.5 total and active parameters (hand-derived)" \
  "$(sed -n 's/^  total *\([0-9]*\)$/\1/p' "$WORK/glm.txt") $(sed -n 's/^  active per token *\([0-9]*\).*/\1/p' "$WORK/glm.txt")" "$want"
grep -q "partial RoPE: the first 64 of each head's 128 dims rotated" "$WORK/glm.txt" && ok "GLM-4.5: half of each head rotated" \
  || bad "GLM-4.5: no partial RoPE line"
grep -q "routing: sigmoid scores with a correction bias, 1 group(s), best 1 kept (by their best two), weights renormalised x 2.5; shared experts, ungated" "$WORK/glm.txt" \
  && ok "GLM-4.5: DeepSeek-V3's routing, scaled by 2.5, one ungated shared expert" || bad "GLM-4.5: routing line: $(grep routing: "$WORK/glm.txt")"
# MiniMax-M2: no biases, q/k norms over the projection, 62 MoE layers of 256 experts, no shared one.
"$MOERUN" inspect --hf-config "$CONFIGS/minimax-m2.json" --nodes 4 --ranks-per-node 8 > "$WORK/mm.txt" 2> "$WORK/mm.err" \
  || bad "minimax-m2: inspect exited $? ($(cat "$WORK/mm.err"))"
want=$("$PY" -c '
V, D, L, H, KV, HD, FF, E, K = 200064, 3072, 62, 48, 8, 128, 1536, 256, 8
attn = D * H * HD + 2 * D * KV * HD + H * HD * D + H * HD + KV * HD + 2 * D
fixed = 2 * V * D + D + L * (attn + E * D)
print(fixed + L * E * 3 * D * FF, fixed + L * K * 3 * D * FF)')
expect_value "MiniMax-M2 total and active parameters (hand-derived)" \
  "$(sed -n 's/^  total *\([0-9]*\)$/\1/p' "$WORK/mm.txt") $(sed -n 's/^  active per token *\([0-9]*\).*/\1/p' "$WORK/mm.txt")" "$want"
grep -q "partial RoPE: the first 64 of each head's 128 dims rotated" "$WORK/mm.txt" && grep -q "qk_norm 1" "$WORK/mm.txt" \
  && ok "MiniMax-M2: half of each head rotated, q/k norms over the projection" || bad "MiniMax-M2: rope or qk_norm lines"
# Qwen3-Next-80B-A3B (transformers' Qwen3NextConfig defaults, which are its published shape): the count
# derived by hand. Per full layer (12): q and gate 2 x 4096 x 2048, k, v 512 x 2048 each, o 2048 x 4096,
# q/k norms 2 x 256, two norms 2 x 2048 = 27,267,584. Per linear layer (36): q/k/v 8192 x 2048, z
# 4096 x 2048, b and a 2 x 32 x 2048, conv 8192 x 4, dt_bias and A_log 2 x 32, norm 128, out 2048 x
# 4096, two norms = 33,722,560. Per MoE layer (48): gate 512 x 2048, shared expert 3 x 512 x 2048 and
# its gate 2048, 512 experts of 3 x 2048 x 512. Embedding and LM head 2 x 151936 x 2048, final norm.
# Total 79,674,391,296; active 2,364,979,968 dense + 48 x 10 x 3,145,728 = 3,874,929,408. The state:
# 36 x (32 x 128 x 128 + 3 x 8192) floats = 75.38 MiB per sequence.
"$MOERUN" inspect --hf-config "$CONFIGS/qwen3-next-80b-a3b.json" --nodes 2 --ranks-per-node 8 > "$WORK/qwen3-next.txt" 2> "$WORK/qwen3-next.err" \
  || bad "qwen3-next: inspect exited $? ($(cat "$WORK/qwen3-next.err"))"
expect_value "Qwen3-Next-80B-A3B total parameters" "$(grep -E '^  total ' "$WORK/qwen3-next.txt" | head -1 | awk '{print $2}')" 79674391296
expect_value "Qwen3-Next-80B-A3B active per token" "$(grep -E 'active per token' "$WORK/qwen3-next.txt" | awk '{print $4}')" 3874929408
grep -q "Gated DeltaNet layers 36 of 48 .*a recurrent state of 75.38 MiB per sequence" "$WORK/qwen3-next.txt" \
  && ok "Qwen3-Next: 36 Gated DeltaNet layers, 75.38 MiB of state per sequence" || bad "Qwen3-Next: no DeltaNet line ($(grep -i deltanet "$WORK/qwen3-next.txt"))"

# What convert refuses, inspect refuses too (issue 63): exit 3, one line naming the field; and a
# bad value is named by the config.json field the user wrote, not by moe-hdf5's attribute.
hf_refused() {
  local what=$1 pattern=$2 edit=$3
  "$PY" -c "import json, sys; c = json.load(open(sys.argv[1])); $edit; json.dump(c, open(sys.argv[2], 'w'))" \
    "$CONFIGS/qwen3-next-80b-a3b.json" "$WORK/edited.json"
  local rc=0
  "$MOERUN" inspect --hf-config "$WORK/edited.json" > /dev/null 2> "$WORK/edited.err" || rc=$?
  check "inspect --hf-config, $what: exit 3, one line ($(cat "$WORK/edited.err"))" \
    bash -c "[ $rc -eq 3 ] && [ \$(wc -l < '$WORK/edited.err') -eq 1 ] && grep -q '$pattern' '$WORK/edited.err'"
}
hf_refused "quant_method awq" 'field quantization_config.quant_method is "awq"' "c['quantization_config'] = {'quant_method': 'awq'}"
hf_refused "fp8 blocks of 64 x 128" 'weight_block_size is \[64,128\], expected \[128, 128\]' \
  "c['quantization_config'] = {'quant_method': 'fp8', 'weight_block_size': [64, 128]}"
hf_refused "fp8 e5m2" 'fmt is "e5m2", expected e4m3' \
  "c['quantization_config'] = {'quant_method': 'fp8', 'fmt': 'e5m2', 'weight_block_size': [128, 128]}"
hf_refused "linear_key_head_dim 0" 'field linear_key_head_dim is 0, expected in \[1, ' "c['linear_key_head_dim'] = 0"
hf_refused "linear_conv_kernel_dim 99" 'field linear_conv_kernel_dim is 99' "c['linear_conv_kernel_dim'] = 99"
hf_refused "num_attention_heads -2" 'field num_attention_heads must be > 0' "c['num_attention_heads'] = -2"
hf_refused "max_position_embeddings 0" 'field max_position_embeddings is 0, expected > 0' "c['max_position_embeddings'] = 0"
hf_refused "num_experts 100000" 'field num_experts is 100000, expected <= ' "c['num_experts'] = 100000"
finish

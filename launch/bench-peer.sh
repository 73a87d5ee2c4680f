#!/usr/bin/env bash
# moerun against llama.cpp on the same CPU, the same weights and the same threads (issue 11).
# Builds llama.cpp from the llama-cpp-python source package on PyPI (it vendors llama.cpp; pinned
# version, checksum verified), writes a GGUF of a synthetic Mixtral- or Qwen3-MoE-shaped moe-hdf5 model
# with the vendored gguf-py (arch llama with q/k permuted, or qwen3moe; experts stacked), checks that both give the same
# greedy tokens, then runs both at each batch size, interleaved, and prints prefill, decode and
# total tokens/s (min / median / max over the runs) and the ratio of the medians.
#
# Usage: launch/bench-peer.sh [--dtypes float32,bfloat16 or q8,q4] [--batches 1,8,32] [--runs 3] [--threads 2]
#                             [--prompt 128] [--new 128] [--shape mixtral|qwen3_moe|qwen3_5_moe] [--moerun-dense none|q8|q4]
#                             [--ik | --ik-src DIR] [--peer-tool peer_decode|batched-bench] [--moerun-huge-pages on|off|auto]
# --peer-tool: how the peers are timed. peer_decode (default): they decode the requests moerun
# decodes, each sequence its own prompt and greedy tokens (launch/peer/peer_decode.cpp).
# batched-bench: llama-batched-bench, whose prompt and generated tokens are all token 0, so every
# sequence and step routes to the same few experts (no user's workload; the figures before
# session 10 were taken so).
# --ik: ik_llama.cpp as a peer too (from the ik-llama-cpp-python source package; --ik-src: a checkout), on
# the first GGUF of each dtype, with its default, -rtr and -no-fmoe; moerun's ratio to its best.
# --moerun-dense q8|q4: moerun quantizes its LM head and attention at load (--quantize-dense), as llama.cpp's types do.
# --moerun-huge-pages (default on): moerun's timed runs with the weights in huge pages, as a job of 2048 decode
# steps or more has them by default (the timed runs are shorter only to keep the bench short).
# --shape qwen3_moe: 128 experts of width 384, top-8, per-head q/k norms (Qwen3-30B-A3B at half width).
# --shape qwen3_5_moe: Qwen3.5-35B-A3B at half width, 4 layers (3 Gated DeltaNet, 1 gated attention), llama.cpp's qwen35moe.
# --dtypes q8,q4: moerun's quantized experts against llama-quantize's Q8_0, Q4_K_M and Q4_0 of the same float32
# model, plus KL divergence against bf16 from both tools (peer-quant.{json,txt}).
# Output: the table on stdout; build/peer/results/peer.{json,txt} (peer-qwen3_moe.* for that shape).
# Takes about 10 minutes to build llama.cpp once on 2 cores (kept in build/peer), then minutes per run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
PEER=$BUILD/peer
ARGS=() IK=0 IK_SRC=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --ik) IK=1; shift ;;
    --ik-src) IK=1; IK_SRC=$2; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" python3 python3-numpy python3-h5py curl ca-certificates clang
moerun_build "$ROOT" "$BUILD" moerun

# 1. llama.cpp, from the source package (no git, no network beyond PyPI).
source "$ROOT/launch/peer/build_peers.sh"
build_llama_cpp "$PEER"
if [ $IK = 1 ]; then build_ik_llama "$PEER" "$IK_SRC"; ARGS+=(--ik-bin "$PEER/ik-bin"); fi
LLAMA=$PEER/llama-cpp-python-$LLAMA_CPP_PYTHON/vendor/llama.cpp

# 2. The runs, the check and the table.
export PYTHONPATH=$LLAMA/gguf-py${PYTHONPATH:+:$PYTHONPATH}
# Debian's interpreter: its numpy and h5py come from the packages installed above.
exec /usr/bin/python3 "$ROOT/launch/peer/bench_peer.py" --moerun "$BUILD/launch/moerun" --peer-bin "$PEER/bin" \
  --work "$PEER/work" --out "$PEER/results" "${ARGS[@]}"

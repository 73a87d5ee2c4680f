#!/usr/bin/env bash
# The serving features of issue 14 measured with `moerun infer` on this machine: expert-cache
# warm-up (time to first token, L1 hit rate), minhash vs FIFO batching (hit rate, tokens/s), the
# prefix cache (prefill skipped, run time), dynamic top-k and per-phase capacity (experts per
# token, tokens/s), hot swap (pause and load per expert). Variants run interleaved; the medians,
# ratios and the commands' options are printed (launch/serving/bench_serving.py).
#
# Usage: launch/bench-serving.sh [--runs 3] [--only warmup,batching,prefix,routing,swap] [--out DIR]
# Output: the tables on stdout; DIR/serving.txt and DIR/serving.json (default build/serving/results).
# Models are made once in build/serving/work (about 2 GB, the 352 MB experts included); 5-10 minutes.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
for a in "$@"; do [ "$a" = -h ] || [ "$a" = --help ] && { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }; done
OUT=$BUILD/serving/results
ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" python3
moerun_build "$ROOT" "$BUILD" moerun
exec python3 "$ROOT/launch/serving/bench_serving.py" --moerun "$BUILD/launch/moerun" --work "$BUILD/serving/work" --out "$OUT" "${ARGS[@]}"

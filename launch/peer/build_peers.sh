# The peers of moerun's benchmarks, built from their PyPI source packages (no git; pinned versions;
# pip checks the index's sha256): llama.cpp (llama-cpp-python's vendored copy) and ik_llama.cpp
# (ik-llama-cpp-python's). Sourced by launch/bench-peer.sh and launch/bench-offload.sh.
# build_llama_cpp PEER_DIR -> PEER_DIR/bin/{llama-batched-bench,llama-quantize,llama-perplexity,llama_greedy,peer_decode}
# build_ik_llama PEER_DIR [SRC] -> PEER_DIR/ik-bin/{llama-batched-bench,peer_decode} (SRC: an ik_llama.cpp checkout instead of PyPI's)
# build_llama_rpc PEER_DIR -> PEER_DIR/rpc-bin/{rpc-server,peer_decode}: the same llama.cpp with GGML_RPC=ON
# build_ik_rpc PEER_DIR -> PEER_DIR/ik-rpc-bin/{rpc-server,peer_decode}: the same ik_llama.cpp with GGML_RPC=ON
LLAMA_CPP_PYTHON=0.3.36      # llama-cpp-python release whose vendored llama.cpp is the peer
IK_LLAMA_CPP_PYTHON=0.1.5    # ik-llama-cpp-python release whose vendored ik_llama.cpp is the other

# peer_sdist DIR PACKAGE VERSION: unpacks the source package into DIR (once)
peer_sdist() {
  local dir=$1 pkg=$2 version=$3 work; work=$(dirname "$dir")
  [ -d "$dir" ] && return 0
  echo "== $pkg $version source package from PyPI" >&2
  mkdir -p "$work"
  # pip fetches it from the index this machine's pip configuration names (its default when none is set).
  # Only this package as source: pip still prepares its metadata in an isolated build environment,
  # and --no-binary :all: built that environment's requirements (cmake, ninja) from source too, for
  # minutes on a machine whose pip cache did not hold their wheels (a fresh one).
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --no-binary "$pkg" "$pkg==$version" -d "$work/sdist-$pkg" >&2
  sha256sum "$work/sdist-$pkg/"*.tar.gz >&2
  mkdir -p "$dir" && tar xzf "$work/sdist-$pkg/"*.tar.gz -C "$dir" --strip-components=1 && rm -rf "$work/sdist-$pkg"
}

# peer_cmake SRC BUILD LOG TARGETS...: a static, native Release build (clang unless PEER_CC says) of the named targets
# (PEER_CMAKE_ARGS: more -D options for this peer; PEER_CC / PEER_CXX: other compilers).
# With clang: under Debian 12's GCC 12 llama.cpp's AMX kernels (the ones it picks for Q4_0, Q8_0 and
# the K-quants on CPUs with AMX) fault at ldtilecfg, GCC having dropped the stores that fill the
# tile config (base/quant_matmul.cpp works around the same bug).
peer_cmake() {
  local src=$1 build=$2 log=$3; shift 3
  cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER="${PEER_CC:-clang}" -DCMAKE_CXX_COMPILER="${PEER_CXX:-clang++}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_CCACHE=OFF \
    ${PEER_CMAKE_ARGS:-} > "$log.configure" 2>&1 || { tail -30 "$log.configure" >&2; return 1; }
  cmake --build "$build" --target "$@" -j "${MOERUN_BUILD_JOBS:-2}" > "$log" 2>&1 || { tail -30 "$log" >&2; return 1; }
}

build_llama_cpp() {
  local peer=$1 root; root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  local src=$peer/llama-cpp-python-$LLAMA_CPP_PYTHON
  local llama=$src/vendor/llama.cpp
  if [ -x "$peer/bin/llama-batched-bench" ] && [ -x "$peer/bin/llama_greedy" ] && [ -x "$peer/bin/llama-quantize" ] &&
     [ -x "$peer/bin/llama-perplexity" ] && [ "$peer/bin/peer_decode" -nt "$root/launch/peer/peer_decode.cpp" ]; then return 0; fi
  mkdir -p "$peer/bin"
  peer_sdist "$src" llama-cpp-python "$LLAMA_CPP_PYTHON"
  echo "== building llama.cpp (GGML_NATIVE, static, clang)" >&2
  peer_cmake "$llama" "$peer/build" "$peer/build.log" llama-batched-bench llama-quantize llama-perplexity llama
  cp "$peer/build/bin/llama-batched-bench" "$peer/build/bin/llama-quantize" "$peer/build/bin/llama-perplexity" "$peer/bin/"
  local libs; libs=$(find "$peer/build" -name 'libllama.a' -o -name 'libggml*.a' | sort -r | tr '\n' ' ')
  local tool
  for tool in llama_greedy peer_decode; do
    clang++ -O2 -std=c++17 -I"$llama/include" -I"$llama/ggml/include" "$root/launch/peer/$tool.cpp" -o "$peer/bin/$tool" \
      -Wl,--start-group $libs -Wl,--end-group -fopenmp -lpthread -ldl
  done
}

# ik_build_info SRC: the source package lacks common/cmake/build-info-gen-cpp.cmake, the script that
# writes common/build-info.cpp from git; written here instead (make then has nothing to regenerate).
ik_build_info() {
  local src=$1
  if [ ! -f "$src/common/cmake/build-info-gen-cpp.cmake" ] && [ ! -f "$src/common/build-info.cpp" ]; then
    sed -e 's/@BUILD_NUMBER@/0/' -e "s/@BUILD_COMMIT@/${src##*/}/" -e "s/@BUILD_COMPILER@/$(gcc -dumpfullversion)/" \
      -e 's/@BUILD_TARGET@/x86_64/' "$src/common/build-info.cpp.in" > "$src/common/build-info.cpp"
  fi
}

build_ik_llama() {
  local peer=$1 src=${2:-} root; root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  [ -x "$peer/ik-bin/llama-batched-bench" ] && [ "$peer/ik-bin/peer_decode" -nt "$root/launch/peer/peer_decode.cpp" ] && return 0
  if [ -z "$src" ]; then
    peer_sdist "$peer/ik-llama-cpp-python-$IK_LLAMA_CPP_PYTHON" ik-llama-cpp-python "$IK_LLAMA_CPP_PYTHON"
    src=$peer/ik-llama-cpp-python-$IK_LLAMA_CPP_PYTHON/vendor/ik_llama.cpp
  fi
  ik_build_info "$src"
  echo "== building ik_llama.cpp from $src (GGML_NATIVE, static, gcc)" >&2
  mkdir -p "$peer/ik-bin"
  # FlashAttention for f16 K/V only (its default instantiates every quant pair: most of a 40-minute
  # build on two cores); the benchmarks keep the KV cache in f16. GCC: Debian 12's clang 14 rejects
  # iqk_common.h's const BlockPermuter member (no AMX code here, so GCC's AMX bug does not apply).
  PEER_CC=gcc PEER_CXX=g++ PEER_CMAKE_ARGS="-DGGML_IQK_FA_ALL_QUANTS=OFF" peer_cmake "$src" "$peer/ik-build" "$peer/ik-build.log" llama-batched-bench
  cp "$peer/ik-build/bin/llama-batched-bench" "$peer/ik-bin/"
  local libs; libs=$(find "$peer/ik-build" -name 'libllama.a' -o -name 'libggml*.a' | sort -r | tr '\n' ' ')
  g++ -O2 -std=c++17 -DPEER_IK -I"$src/include" -I"$src/ggml/include" "$root/launch/peer/peer_decode.cpp" -o "$peer/ik-bin/peer_decode" \
    -Wl,--start-group $libs -Wl,--end-group -fopenmp -lpthread -ldl
}

# ik_llama.cpp's RPC backend, the same way: PEER_DIR/ik-rpc-bin/{rpc-server,peer_decode}.
build_ik_rpc() {
  local peer=$1 root; root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  local src=$peer/ik-llama-cpp-python-$IK_LLAMA_CPP_PYTHON/vendor/ik_llama.cpp
  [ -x "$peer/ik-rpc-bin/rpc-server" ] && [ "$peer/ik-rpc-bin/peer_decode" -nt "$root/launch/peer/peer_decode.cpp" ] && return 0
  peer_sdist "$peer/ik-llama-cpp-python-$IK_LLAMA_CPP_PYTHON" ik-llama-cpp-python "$IK_LLAMA_CPP_PYTHON"
  ik_build_info "$src"
  echo "== building ik_llama.cpp with GGML_RPC (GGML_NATIVE, static, gcc)" >&2
  mkdir -p "$peer/ik-rpc-bin"
  PEER_CC=gcc PEER_CXX=g++ PEER_CMAKE_ARGS="-DGGML_RPC=ON -DGGML_IQK_FA_ALL_QUANTS=OFF" \
    peer_cmake "$src" "$peer/ik-rpc-build" "$peer/ik-rpc-build.log" rpc-server llama
  cp "$peer/ik-rpc-build/bin/rpc-server" "$peer/ik-rpc-bin/rpc-server"
  local libs; libs=$(find "$peer/ik-rpc-build" -name 'libllama.a' -o -name 'libggml*.a' | sort -r | tr '\n' ' ')
  g++ -O2 -std=c++17 -DPEER_IK -DPEER_RPC -I"$src/include" -I"$src/ggml/include" "$root/launch/peer/peer_decode.cpp" \
    -o "$peer/ik-rpc-bin/peer_decode" -Wl,--start-group $libs -Wl,--end-group -fopenmp -lpthread -ldl
}

# llama.cpp's RPC backend: rpc-server for each node, peer_decode with rpc=SERVERS on the head node.
build_llama_rpc() {
  local peer=$1 root; root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  local llama=$peer/llama-cpp-python-$LLAMA_CPP_PYTHON/vendor/llama.cpp
  [ -x "$peer/rpc-bin/rpc-server" ] && [ "$peer/rpc-bin/peer_decode" -nt "$root/launch/peer/peer_decode.cpp" ] && return 0
  peer_sdist "$peer/llama-cpp-python-$LLAMA_CPP_PYTHON" llama-cpp-python "$LLAMA_CPP_PYTHON"
  echo "== building llama.cpp with GGML_RPC (GGML_NATIVE, static, clang)" >&2
  mkdir -p "$peer/rpc-bin"
  PEER_CMAKE_ARGS="-DGGML_RPC=ON -DGGML_RPC_RDMA=OFF" peer_cmake "$llama" "$peer/rpc-build" "$peer/rpc-build.log" ggml-rpc-server llama
  cp "$peer/rpc-build/bin/ggml-rpc-server" "$peer/rpc-bin/rpc-server"
  local libs; libs=$(find "$peer/rpc-build" -name 'libllama.a' -o -name 'libggml*.a' | sort -r | tr '\n' ' ')
  clang++ -O2 -std=c++17 -DPEER_RPC -I"$llama/include" -I"$llama/ggml/include" "$root/launch/peer/peer_decode.cpp" -o "$peer/rpc-bin/peer_decode" \
    -Wl,--start-group $libs -Wl,--end-group -fopenmp -lpthread -ldl
}

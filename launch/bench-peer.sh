#!/usr/bin/env bash
# moerun against llama.cpp on the same CPU, the same weights and the same threads (issue 11).
# Builds llama.cpp from the llama-cpp-python source package on PyPI (it vendors llama.cpp; pinned
# version, checksum verified), writes a GGUF of a synthetic Mixtral- or Qwen3-MoE-shaped moe-hdf5 model
# with the vendored gguf-py (arch llama with q/k permuted, or qwen3moe; experts stacked), checks that both give the same
# greedy tokens, then runs both at each batch size, interleaved, and prints prefill, decode and
# total tokens/s (min / median / max over the runs) and the ratio of the medians.
#
# Usage: launch/bench-peer.sh [--dtypes float32,bfloat16 or q8,q4] [--batches 1,8,32] [--runs 3] [--threads 2]
#                             [--prompt 128] [--new 128] [--shape mixtral|qwen3_moe] [--moerun-dense none|q8|q4]
# --moerun-dense q8|q4: moerun quantizes its LM head and attention at load (--quantize-dense), as llama.cpp's types do.
# --shape qwen3_moe: 128 experts of width 384, top-8, per-head q/k norms (Qwen3-30B-A3B at half width).
# --dtypes q8,q4: moerun's quantized experts against llama-quantize's Q8_0, Q4_K_M and Q4_0 of the same float32
# model, plus KL divergence against bf16 from both tools (peer-quant.{json,txt}).
# Output: the table on stdout; build/peer/results/peer.{json,txt} (peer-qwen3_moe.* for that shape).
# Takes about 10 minutes to build llama.cpp once on 2 cores (kept in build/peer), then minutes per run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
PEER=$BUILD/peer
LLAMA_CPP_PYTHON=0.3.36  # llama-cpp-python release whose vendored llama.cpp is the peer
ARGS=("$@")
for a in "$@"; do [ "$a" = -h ] || [ "$a" = --help ] && { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }; done

source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" python3 python3-numpy python3-h5py curl ca-certificates clang
moerun_build "$ROOT" "$BUILD" moerun

# 1. llama.cpp, from the source package (no git, no network beyond PyPI).
SRC=$PEER/llama-cpp-python-$LLAMA_CPP_PYTHON
LLAMA=$SRC/vendor/llama.cpp
if [ ! -x "$PEER/bin/llama-batched-bench" ] || [ ! -x "$PEER/bin/llama_greedy" ] || [ ! -x "$PEER/bin/llama-quantize" ] ||
   [ ! -x "$PEER/bin/llama-perplexity" ]; then
  mkdir -p "$PEER/bin"
  if [ ! -d "$LLAMA" ]; then
    echo "== llama-cpp-python $LLAMA_CPP_PYTHON source package from PyPI" >&2
    # pip fetches it from the index and mirrors this machine's pip configuration names (its
    # default index when none is set) and checks the index's sha256 of the file.
    python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$PEER" >&2
    sha256sum "$PEER/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" >&2
    mv "$PEER/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" "$PEER/sdist.tar.gz"
    mkdir -p "$SRC" && tar xzf "$PEER/sdist.tar.gz" -C "$SRC" --strip-components=1 && rm "$PEER/sdist.tar.gz"
  fi
  # With clang: under Debian 12's GCC 12 its AMX kernels (the ones it picks for Q4_0, Q8_0 and
  # the K-quants on CPUs with AMX) fault at ldtilecfg, GCC having dropped the stores that fill
  # the tile config (base/quant_matmul.cpp works around the same bug).
  echo "== building llama.cpp (GGML_NATIVE, static, clang)" >&2
  cmake -S "$LLAMA" -B "$PEER/build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DGGML_CCACHE=OFF > "$PEER/configure.log" 2>&1 ||
    { tail -30 "$PEER/configure.log" >&2; exit 1; }
  cmake --build "$PEER/build" --target llama-batched-bench llama-quantize llama-perplexity llama -j "${MOERUN_BUILD_JOBS:-2}" > "$PEER/build.log" 2>&1 ||
    { tail -30 "$PEER/build.log" >&2; exit 1; }
  cp "$PEER/build/bin/llama-batched-bench" "$PEER/build/bin/llama-quantize" "$PEER/build/bin/llama-perplexity" "$PEER/bin/"
  libs=$(find "$PEER/build" -name 'libllama.a' -o -name 'libggml*.a' | sort -r | tr '\n' ' ')
  clang++ -O2 -std=c++17 -I"$LLAMA/include" -I"$LLAMA/ggml/include" "$ROOT/launch/peer/llama_greedy.cpp" -o "$PEER/bin/llama_greedy" \
    -Wl,--start-group $libs -Wl,--end-group -fopenmp -lpthread -ldl
fi

# 2. The runs, the check and the table.
export PYTHONPATH=$LLAMA/gguf-py${PYTHONPATH:+:$PYTHONPATH}
# Debian's interpreter: its numpy and h5py come from the packages installed above.
exec /usr/bin/python3 "$ROOT/launch/peer/bench_peer.py" --moerun "$BUILD/launch/moerun" --peer-bin "$PEER/bin" \
  --work "$PEER/work" --out "$PEER/results" "${ARGS[@]}"

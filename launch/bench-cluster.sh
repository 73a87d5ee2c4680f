#!/usr/bin/env bash
# moerun against llama.cpp's RPC backend on an emulated cluster (issue 67): K nodes as network
# namespaces (cluster/local/up.sh: shaped links, a memory cgroup per node), a model of SIZE x one
# node's memory, decode and prefill tokens/s at N sequences, each node's peak memory, OOM kills,
# network and disk bytes per token (and the tokens/s the links bound them to), and moerun's tokens
# against one node's run (launch/peer/bench_cluster.py). moerun runs a router and an expert rank on
# every node, and with 3 nodes or more also the router alone on node 1 (--router-nodes 1).
# Builds llama.cpp with GGML_RPC from the same PyPI source package bench-peer.sh uses (rpc-server,
# peer_decode rpc=), and llama-quantize for the Q4_K_M GGUF.
#
# Usage: launch/bench-cluster.sh [--nodes 2,3] [--sizes 1.5,3] [--node-memory 768M] [--link 10gbit]
#                                [--batches 1,8,32] [--runs 2] [--prompt 32] [--new 16] [--server-fill 0.8] [--ik]
# --ik: also ik_llama.cpp's RPC backend, built the same way from its PyPI source package (~10 min once).
# --server-fill F: where every layer on the servers is OOM-killed, "llama.cpp fit" runs too: -ngl with
#   the layers that fill F of a node's memory on each server (half that on node 1, the head's), the rest
#   on the head's CPU from the mapped GGUF (--no-repack).
# Needs root (namespaces, cgroup v1 memory groups). Output: the table on stdout;
# build/peer/results/cluster.{json,txt}. The models are kept in build/peer/cluster-work.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
PEER=$BUILD/peer
case "${1:-}" in -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
ARGS=() IK=0
for a in "$@"; do if [ "$a" = --ik ]; then IK=1; else ARGS+=("$a"); fi; done
[ "$(id -u)" -eq 0 ] || { echo "bench-cluster.sh: needs root (network namespaces, memory cgroups)" >&2; exit 2; }
source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" python3 python3-numpy python3-h5py curl ca-certificates clang iproute2
moerun_build "$ROOT" "$BUILD" moerun
source "$ROOT/launch/peer/build_peers.sh"
build_llama_cpp "$PEER"
build_llama_rpc "$PEER"
IK_ARGS=()
if [ "$IK" = 1 ]; then build_ik_rpc "$PEER"; IK_ARGS=(--ik-rpc-bin "$PEER/ik-rpc-bin"); fi
LLAMA=$PEER/llama-cpp-python-$LLAMA_CPP_PYTHON/vendor/llama.cpp
export PYTHONPATH=$LLAMA/gguf-py${PYTHONPATH:+:$PYTHONPATH}
trap '"$ROOT/cluster/local/down.sh"' EXIT
/usr/bin/python3 "$ROOT/launch/peer/bench_cluster.py" --moerun "$BUILD/launch/moerun" --rpc-bin "$PEER/rpc-bin" \
  --peer-bin "$PEER/bin" --cluster "$ROOT/cluster/local" --work "$PEER/cluster-work" --out "$PEER/results" "${IK_ARGS[@]}" \
  "${ARGS[@]}"

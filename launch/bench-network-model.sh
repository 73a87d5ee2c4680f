#!/usr/bin/env bash
# The network model on the emulated cluster (issue 67): per link rate, `bench a2a` across 2 nodes
# fits alpha and bandwidth per algorithm (mpi, hier) and pattern (m2n: routers to expert ranks, as
# the MoE exchange sends; uniform), then `bench infer --link-fit` runs the same layout and prints the
# routers' measured exchange time against the fit's prediction for the same steps. A model with a
# wide hidden row (the bytes), narrow experts and attention (little compute: the routers reach each
# exchange together, and the expert ranks return at once) isolates the exchange.
# Runs are interleaved over batches and algorithms. Then the flat and the hierarchical exchange at
# 2 and 4 ranks a node (uniform), where more ranks a node give hier fewer, larger messages.
# --layout apart: one rank a node, each node on a core of its own (up.sh --node-cores 1): the router
# on node 1, the expert rank on node 2 (--ranks-per-node 2 makes them one virtual node's roles), the
# flat exchange only. No process then waits for a core another holds, as none would on real nodes.
#
# Usage: launch/bench-network-model.sh [--links 1gbit,10gbit] [--batches 2,16,64] [--runs 3]
#                                      [--layout shared|apart] [--out DIR]
# Needs root (namespaces). Output: the table on stdout; DIR (build/network-model) keeps every JSON.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
LINKS=1gbit,10gbit BATCHES=2,16,64 RUNS=3 OUT=$BUILD/network-model LAYOUT=shared
while [ $# -gt 0 ]; do
  case $1 in
    --layout) LAYOUT=$2; shift 2 ;;
    --links) LINKS=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-network-model.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "bench-network-model.sh: needs root (network namespaces)" >&2; exit 2; }
case $LAYOUT in
  shared) NP=4 MAP=(--map-by ppr:2:node) ROLES=() ALGOS=(mpi hier) UP=() ;;
  apart) NP=2 MAP=(--map-by ppr:1:node) ROLES=(--ranks-per-node 2) ALGOS=(mpi) UP=(--node-cores 1) ;;
  *) echo "bench-network-model.sh: --layout is shared or apart, not $LAYOUT" >&2; exit 2 ;;
esac
source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" python3 iproute2
moerun_build "$ROOT" "$BUILD" moerun
M=$BUILD/launch/moerun CMPI=$ROOT/cluster/local/mpirun.sh
UCX=(-x UCX_TLS=tcp,self -x UCX_NET_DEVICES=eth0)
SHAPE=(--layers 4 --hidden 2048 --experts 8 --top-k 2 --intermediate 64 --heads 2 --kv-heads 1 --head-dim 32 --vocab 256)
mkdir -p "$OUT"
trap '"$ROOT/cluster/local/down.sh" > /dev/null 2>&1 || true' EXIT
for link in ${LINKS//,/ }; do
  "$ROOT/cluster/local/down.sh" > /dev/null 2>&1 || true
  "$ROOT/cluster/local/up.sh" 2 --link "$link" "${UP[@]}" > /dev/null
  "$CMPI" -np $NP "${MAP[@]}" "${UCX[@]}" "$M" bench a2a "${ROLES[@]}" --patterns m2n,n2m,uniform --algos "$(IFS=,; echo "${ALGOS[*]}")" \
    --min-bytes 1024 --max-bytes 4194304 --iters 9 --json "$OUT/fit-$link.json" < /dev/null > "$OUT/fit-$link.txt"
  grep 'alpha-beta fit' "$OUT/fit-$link.txt" | sed "s/^/$link /"
  for run in $(seq "$RUNS"); do
    for b in ${BATCHES//,/ }; do
      for algo in "${ALGOS[@]}"; do
        "$CMPI" -np $NP "${MAP[@]}" "${UCX[@]}" "$M" bench infer "${SHAPE[@]}" "${ROLES[@]}" --batch "$b" --prompt-len 1 --new-tokens 12 \
          --no-baseline --a2a "$algo" --link-fit "$OUT/fit-$link.json" --json "$OUT/infer-$link-b$b-$algo-r$run.json" < /dev/null > /dev/null
      done
    done
  done
  [ "$LAYOUT" = shared ] || continue  # one rank a node: no node for hier to aggregate
  for rpn in 2 4; do
    "$CMPI" -np $((2 * rpn)) --map-by ppr:$rpn:node --oversubscribe "${UCX[@]}" "$M" bench a2a --patterns uniform --algos mpi,hier \
      --min-bytes 256 --max-bytes 1048576 --iters 9 --json "$OUT/flat-hier-$link-rpn$rpn.json" < /dev/null > "$OUT/flat-hier-$link-rpn$rpn.txt"
  done
done
"$ROOT/cluster/local/down.sh" > /dev/null
python3 - "$OUT" "$LINKS" "$BATCHES" "$((NP / 2))" <<'PY'
import glob, json, os, statistics, sys
out, links, batches, routers = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), int(sys.argv[4])
print("| link | batch (tokens a router) | algo | predicted ms per decode step | measured / predicted (min / median / max) | decode tokens/s (median) |")
print("| --- | --- | --- | --- | --- | --- |")
for link in links:
    for b in batches:
        for algo in ("mpi", "hier"):
            runs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/infer-{link}-b{b}-{algo}-r*.json"))]
            if not runs:
                continue
            xs = [j["link_fit"] for j in runs]
            odd = [x for x in xs if x["measured_pairs"] != x["predicted_pairs"]]
            if odd:
                print(f"note: {link} batch {b} {algo}: measured {odd[0]['measured_pairs']} pairs, predicted {odd[0]['predicted_pairs']}")
            r = sorted(x["measured_s"] / x["predicted_s"] for x in xs)
            tps = statistics.median(j["decode"]["tokens_per_s"] for j in runs)
            print(f"| {link} | {b} ({(int(b) + routers - 1) // routers}) | {algo} | {1e3 * xs[0]['decode_step_predicted_s']:.2f} | "
                  f"{r[0]:.2f} / {statistics.median(r):.2f} / {r[-1]:.2f} | {tps:.0f} |")
print()
print("| link | ranks a node | algo | alpha (us) | GB/s | largest error | hier / mpi time at 256 B, 4 KiB, 64 KiB, 1 MiB |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for link in links:
    for rpn in (2, 4):
        f = f"{out}/flat-hier-{link}-rpn{rpn}.json"
        if not os.path.exists(f):
            continue
        j = json.load(open(f))
        t = {(r["algo"], r["bytes_per_rank"]): r["time_us"]["median"] for r in j["rows"]}
        ratios = ", ".join(f"{t[('hier', s)] / t[('mpi', s)]:.2f}" for s in (256, 4096, 65536, 1048576) if ("hier", s) in t)
        for fit in j["fits"]:
            print(f"| {link} | {rpn} | {fit['algo']} | {fit['alpha_us']:.0f} | {fit['bandwidth_gbps']:.3f} | "
                  f"{100 * fit['max_error']:.0f}% | {ratios if fit['algo'] == 'hier' else ''} |")
PY

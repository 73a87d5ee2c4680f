#!/usr/bin/env bash
# A local multi-host cluster on one machine: K network namespaces ("hosts") joined by a bridge,
# each with its own address, so MPI and UCX carry real TCP between distinct addresses.
# The bridge is joined to no outside interface: traffic stays among the namespaces made here.
#   usage: cluster/local/up.sh [K=2]     (root; teardown: cluster/local/down.sh)
# Writes cluster/local/run/hostfile (one line per host, slots=4) and prints how to run mpirun.
set -euo pipefail
K=${1:-2}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
[ "$(id -u)" -eq 0 ] || { echo "cluster/local/up.sh: needs root (ip netns, veth, bridge)" >&2; exit 2; }
command -v ip > /dev/null || { echo "cluster/local/up.sh: needs iproute2 (ip)" >&2; exit 2; }
"$HERE/down.sh" > /dev/null 2>&1 || true
mkdir -p "$RUN_DIR"
ip link add "$BRIDGE" type bridge
ip addr add "$SUBNET_PREFIX.254/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
: > "$RUN_DIR/hostfile"
for i in $(seq 1 "$K"); do
  ns="$NS_PREFIX$i"
  ip netns add "$ns"
  ip link add "veth-$ns" type veth peer name eth0 netns "$ns"
  ip link set "veth-$ns" master "$BRIDGE" up
  ip -n "$ns" addr add "$SUBNET_PREFIX.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  echo "$SUBNET_PREFIX.$i slots=4" >> "$RUN_DIR/hostfile"
done
echo "$K" > "$RUN_DIR/hosts"
cat <<MSG
cluster/local: $K hosts ${SUBNET_PREFIX}.1..$K on bridge $BRIDGE. Run across them with:
  $HERE/mpirun.sh -np 4 --map-by ppr:2:node <program> ...
MSG

#!/usr/bin/env bash
# A local multi-host cluster on one machine: K network namespaces ("hosts") joined by a bridge,
# each with its own address, so MPI and UCX carry real TCP between distinct addresses.
# The bridge is joined to no outside interface: traffic stays among the namespaces made here.
# Optionally an emulated cluster:
#   --link RATE[,DELAY] each host's outgoing link shaped: RATE by a token bucket (tbf, e.g. 25gbit or
#                      200mbit), DELAY by netem (e.g. 10us) where the kernel has it (sch_netem;
#                      without it a DELAY is refused rather than left out)
#   --node-memory SIZE each host in its own cgroup v1 memory group of SIZE (e.g. 2G), page cache
#                      counted: every process mpirun.sh starts there joins it (rsh-agent.sh)
#   --node-cores N     each host in its own cgroup v1 cpuset of N cores no other host uses (refused
#                      where K x N exceeds the machine's cores): a host's processes share only its cores
#   usage: cluster/local/up.sh [K=2] [--link RATE[,DELAY]] [--node-memory SIZE] [--node-cores N]
#          (root; teardown: down.sh)
# Writes cluster/local/run/hostfile (one line per host, slots=4) and prints how to run mpirun.
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
core_list() {  # "0-3,6" -> 0 1 2 3 6, one a line
  local part
  for part in ${1//,/ }; do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}
K=2 LINK= MEMORY= CORES=
while [ $# -gt 0 ]; do
  case $1 in
    --link) LINK=${2:?--link needs RATE[,DELAY]}; shift 2 ;;
    --node-memory) MEMORY=${2:?--node-memory needs a SIZE}; shift 2 ;;
    --node-cores) CORES=${2:?--node-cores needs N}; shift 2 ;;
    [0-9]*) K=$1; shift ;;
    *) echo "cluster/local/up.sh: unknown argument $1 (usage: up.sh [K] [--link RATE[,DELAY]] [--node-memory SIZE] [--node-cores N])" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "cluster/local/up.sh: needs root (ip netns, veth, bridge)" >&2; exit 2; }
command -v ip > /dev/null || { echo "cluster/local/up.sh: needs iproute2 (ip)" >&2; exit 2; }
RATE=${LINK%%,*} DELAY=
[[ $LINK == *,* ]] && DELAY=${LINK#*,}
if [ -n "$LINK" ]; then
  command -v tc > /dev/null || { echo "cluster/local/up.sh: --link needs tc (iproute2)" >&2; exit 2; }
  [[ $RATE =~ ^([0-9]+)([kmg]?)bit$ ]] || { echo "cluster/local/up.sh: --link's RATE is like 25gbit or 200mbit, not $RATE" >&2; exit 2; }
  # The bucket holds 200 us of the rate (at least 16 KiB: the watchdog is a high-resolution timer,
  # and tbf splits larger GSO packets). A real link sends every byte at its rate; a bucket of 10 ms
  # let each exchange below 1.25 MB (at 1 Gbit/s) pass at the bridge's speed whenever the link had
  # idled, so an exchange's time depended on the pause before it, not on its bytes.
  unit=${BASH_REMATCH[2]}
  mult=$(case $unit in k) echo 1000 ;; m) echo 1000000 ;; g) echo 1000000000 ;; *) echo 1 ;; esac)
  BURST=$(( BASH_REMATCH[1] * mult / 8 / 5000 ))
  [ "$BURST" -lt 16384 ] && BURST=16384
  if [ -n "$DELAY" ]; then
    ok=0
    ip netns add "$NS_PREFIX-probe"
    ip netns exec "$NS_PREFIX-probe" tc qdisc add dev lo root netem delay "$DELAY" 2>/dev/null && ok=1
    ip netns del "$NS_PREFIX-probe" 2>/dev/null
    [ "$ok" = 1 ] || { echo "cluster/local/up.sh: this kernel has no netem (sch_netem): a link DELAY ($DELAY) cannot be emulated; give --link $RATE alone" >&2; exit 2; }
  fi
fi
if [ -n "$MEMORY" ] && [ ! -d "$CGROUP_ROOT" ]; then
  echo "cluster/local/up.sh: --node-memory needs the cgroup v1 memory controller at $CGROUP_ROOT" >&2; exit 2
fi
if [ -n "$CORES" ]; then
  [[ $CORES =~ ^[1-9][0-9]*$ ]] || { echo "cluster/local/up.sh: --node-cores is a whole number of cores >= 1, not $CORES" >&2; exit 2; }
  [ -f "$CPUSET_ROOT/cpuset.cpus" ] || { echo "cluster/local/up.sh: --node-cores needs the cgroup v1 cpuset controller at $CPUSET_ROOT" >&2; exit 2; }
  mapfile -t ALL_CORES < <(core_list "$(cat "$CPUSET_ROOT/cpuset.effective_cpus" 2>/dev/null || cat "$CPUSET_ROOT/cpuset.cpus")")
  [ $((K * CORES)) -le ${#ALL_CORES[@]} ] || {
    echo "cluster/local/up.sh: --node-cores $CORES for $K hosts needs $((K * CORES)) cores; this machine has ${#ALL_CORES[@]}" >&2; exit 2; }
fi
"$HERE/down.sh" > /dev/null 2>&1 || true
mkdir -p "$RUN_DIR"
if [ -n "$CORES" ]; then  # a v1 cpuset takes children only once its own cores and memory nodes are set
  mkdir -p "$CPUSET_ROOT/$CGROUP_GROUP"
  cat "$CPUSET_ROOT/cpuset.cpus" > "$CPUSET_ROOT/$CGROUP_GROUP/cpuset.cpus"
  cat "$CPUSET_ROOT/cpuset.mems" > "$CPUSET_ROOT/$CGROUP_GROUP/cpuset.mems"
fi
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
  if [ -n "$DELAY" ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "$DELAY" limit 100000
    ip netns exec "$ns" tc qdisc add dev eth0 parent 1:1 handle 10: tbf rate "$RATE" burst "$BURST" latency 100ms
  elif [ -n "$LINK" ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$RATE" burst "$BURST" latency 100ms
  fi
  if [ -n "$MEMORY" ]; then
    mkdir -p "$CGROUP_ROOT/$CGROUP_GROUP/$ns"
    echo "$MEMORY" > "$CGROUP_ROOT/$CGROUP_GROUP/$ns/memory.limit_in_bytes"
  fi
  if [ -n "$CORES" ]; then
    mine=("${ALL_CORES[@]:$(( (i - 1) * CORES )):$CORES}")
    mkdir -p "$CPUSET_ROOT/$CGROUP_GROUP/$ns"
    cat "$CPUSET_ROOT/cpuset.mems" > "$CPUSET_ROOT/$CGROUP_GROUP/$ns/cpuset.mems"
    (IFS=,; echo "${mine[*]}") > "$CPUSET_ROOT/$CGROUP_GROUP/$ns/cpuset.cpus"
  fi
  echo "$SUBNET_PREFIX.$i slots=4" >> "$RUN_DIR/hostfile"
done
echo "$K" > "$RUN_DIR/hosts"
[ -n "$MEMORY" ] && echo "$MEMORY" > "$RUN_DIR/node-memory"
[ -n "$LINK" ] && echo "$LINK" > "$RUN_DIR/link"
[ -n "$CORES" ] && echo "$CORES" > "$RUN_DIR/node-cores"
cat <<MSG
cluster/local: $K hosts ${SUBNET_PREFIX}.1..$K on bridge $BRIDGE${LINK:+, links $LINK}${MEMORY:+, $MEMORY a host}${CORES:+, $CORES cores a host}. Run across them with:
  $HERE/mpirun.sh -np 4 --map-by ppr:2:node <program> ...
MSG

#!/usr/bin/env bash
# Removes everything cluster/local/up.sh created: its namespaces, veth pairs (and their shaping),
# bridge, memory cgroups, cpusets and run folder.
#   usage: cluster/local/down.sh
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NS_PREFIX[0-9]*$"); do
  ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  ip link del "veth-$ns" 2>/dev/null
  ip netns del "$ns"
done
ip link del "$BRIDGE" 2>/dev/null
for root in "$CGROUP_ROOT" "$CPUSET_ROOT"; do
  [ -d "$root/$CGROUP_GROUP" ] || continue
  for g in "$root/$CGROUP_GROUP"/*/; do
    [ -d "$g" ] || continue
    xargs -r kill -9 < "$g/cgroup.procs" 2>/dev/null
    for _ in $(seq 1 50); do rmdir "$g" 2>/dev/null && break; sleep 0.1; done
  done
  rmdir "$root/$CGROUP_GROUP" 2>/dev/null
done
rm -rf "$RUN_DIR"
exit 0

#!/usr/bin/env bash
# mpirun's rsh agent for the local cluster: "rsh-agent.sh [options] HOST command..." runs the
# command inside the namespace whose address is HOST, and in that host's memory cgroup when up.sh
# made one (--node-memory): every process of the host then counts against its memory, and sees the
# limit in /sys/fs/cgroup as on a real node. Likewise its cpuset (--node-cores).
#   usage: rsh-agent.sh [options] HOST COMMAND...   (run by mpirun, not by hand)
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # ssh-style options mpirun may add
host=$1
shift
ns="$NS_PREFIX${host##*.}"
[ -d "$CPUSET_ROOT/$CGROUP_GROUP/$ns" ] && echo $$ > "$CPUSET_ROOT/$CGROUP_GROUP/$ns/cgroup.procs"  # up.sh --node-cores
if [ -d "$CGROUP_ROOT/$CGROUP_GROUP/$ns" ]; then
  echo $$ > "$CGROUP_ROOT/$CGROUP_GROUP/$ns/cgroup.procs"
  # ip netns exec remounts /sys for the namespace, which hides the cgroup hierarchy: the memory
  # controller is mounted again inside (in the command's own mount namespace), so that a process
  # reads its node's limit as on a real node (moerun's --memory-budget auto does).
  exec ip netns exec "$ns" sh -c 'mount -t tmpfs cgroup_root "$(dirname "$1")" && mkdir -p "$1" &&
    mount -t cgroup -o memory memory "$1" && exec sh -c "$2"' rsh-agent "$CGROUP_ROOT" "$*"
fi
exec ip netns exec "$ns" sh -c "$*"

#!/usr/bin/env bash
# mpirun's rsh agent for the local cluster: "rsh-agent.sh [options] HOST command..." runs the
# command inside the namespace whose address is HOST, and in that host's memory cgroup when up.sh
# made one (--node-memory): every process of the host then counts against its memory.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # ssh-style options mpirun may add
host=$1
shift
ns="$NS_PREFIX${host##*.}"
if [ -d "$CGROUP_ROOT/$CGROUP_GROUP/$ns" ]; then echo $$ > "$CGROUP_ROOT/$CGROUP_GROUP/$ns/cgroup.procs"; fi
exec ip netns exec "$ns" sh -c "$*"

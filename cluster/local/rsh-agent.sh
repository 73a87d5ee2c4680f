#!/usr/bin/env bash
# mpirun's rsh agent for the local cluster: "rsh-agent.sh [options] HOST command..." runs the
# command inside the namespace whose address is HOST.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # ssh-style options mpirun may add
host=$1
shift
ns="$NS_PREFIX${host##*.}"
exec ip netns exec "$ns" sh -c "$*"

#!/usr/bin/env bash
# Stops what cluster/objectstore/start.sh started (Swift servers, memcached) and removes its state.
#   usage: cluster/objectstore/stop.sh [--keep-data]
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
for f in "$OS_DIR"/run/*.pid; do
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  kill "$pid" 2> /dev/null
  for _ in $(seq 1 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2> /dev/null
  rm -f "$f"
done
[ "${1:-}" = "--keep-data" ] || rm -rf "$OS_DIR"
exit 0

#!/usr/bin/env bash
# Stops or restarts only the S3 front end (the Swift proxy) of the local object store, keeping its
# data: the failure tests use it to take the server away in the middle of a run.
#   usage: cluster/objectstore/proxy.sh stop|start
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
pidfile=$OS_DIR/run/proxy.pid
case ${1:-} in
  stop)
    [ -f "$pidfile" ] || { echo "proxy.sh: no proxy running (no $pidfile)" >&2; exit 1; }
    pid=$(cat "$pidfile")
    kill "$pid" 2> /dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2> /dev/null || true
    rm -f "$pidfile" ;;
  start)
    setsid swift-proxy-server "$OS_DIR/etc/proxy-server.conf" -v >> "$OS_DIR/log/proxy.log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    for _ in $(seq 1 100); do
      curl -sf "http://127.0.0.1:$OS_PORT/healthcheck" > /dev/null 2>&1 && exit 0
      sleep 0.1
    done
    echo "proxy.sh: the proxy did not come back" >&2; exit 1 ;;
  *) echo "usage: proxy.sh stop|start" >&2; exit 2 ;;
esac

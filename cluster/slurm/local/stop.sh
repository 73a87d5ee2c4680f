#!/usr/bin/env bash
# Stops what cluster/slurm/local/start.sh started: jobs, slurmd, slurmctld, and munged if it
# started it; removes its run directory.
#   usage: cluster/slurm/local/stop.sh
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -uo pipefail
RUN=${MOERUN_SLURM_DIR:-/tmp/moerun-slurm}
export SLURM_CONF="$RUN/etc/slurm.conf"
[ -f "$SLURM_CONF" ] && scancel --user=root > /dev/null 2>&1
for d in slurmd slurmctld; do
  [ -f "$RUN/$d.pid" ] && kill "$(cat "$RUN/$d.pid")" 2>/dev/null
done
sleep 0.5
pkill -f "slurmd -f $SLURM_CONF" 2>/dev/null
pkill -f "slurmctld -f $SLURM_CONF" 2>/dev/null
if [ -f "$RUN/started-munged" ]; then
  pkill -x munged 2>/dev/null
  for _ in $(seq 1 50); do pgrep -x munged > /dev/null || break; sleep 0.1; done
fi
rm -rf "$RUN"
exit 0

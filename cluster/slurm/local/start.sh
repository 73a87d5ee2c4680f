#!/usr/bin/env bash
# A real one-node Slurm on this machine for the tests: installs Debian's slurm-wlm and munge when
# missing, writes a configuration (this host, 8 CPUs declared so tests can run several ranks),
# starts munged, slurmctld and slurmd, and waits until the node is idle. Stop with stop.sh.
#   usage: cluster/slurm/local/start.sh        (root)
# Prints the SLURM_CONF to export for sbatch/srun/sinfo.
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=${MOERUN_SLURM_DIR:-/tmp/moerun-slurm}
[ "$(id -u)" -eq 0 ] || { echo "slurm/local/start.sh: needs root" >&2; exit 2; }
missing=()
for p in slurm-wlm munge; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null
fi
"$HERE/stop.sh" > /dev/null 2>&1 || true
mkdir -p "$RUN"/{etc,state,spool,log}
host=$(hostname -s)
cat > "$RUN/etc/slurm.conf" <<CONF
ClusterName=moerun-local
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$RUN/state
SlurmdSpoolDir=$RUN/spool
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$RUN/log/slurmctld.log
SlurmdLogFile=$RUN/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
SlurmctldPort=${MOERUN_SLURMCTLD_PORT:-6917}
SlurmdPort=${MOERUN_SLURMD_PORT:-6918}
NodeName=$host CPUs=8 Boards=1 SocketsPerBoard=1 CoresPerSocket=8 ThreadsPerCore=1 RealMemory=8000 State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$RUN/etc/slurm.conf"
# munge: a key, its directories, the daemon (as root with --force: the test container has no munge service).
[ -s /etc/munge/munge.key ] || mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
mkdir -p /run/munge /var/lib/munge /var/log/munge
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge > /dev/null 2>&1; then
  runuser -u munge -- munged 2>/dev/null || munged --force
  touch "$RUN/started-munged"
  for _ in $(seq 1 50); do munge -n 2>/dev/null | unmunge > /dev/null 2>&1 && break; sleep 0.1; done
fi
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 1 100); do
  state=$(sinfo -h -o %T 2>/dev/null | head -1)
  [ "$state" = "idle" ] && break
  sleep 0.2
done
[ "$state" = "idle" ] || { echo "slurm/local/start.sh: node did not become idle (state: ${state:-none}); logs in $RUN/log" >&2; exit 1; }
echo "export SLURM_CONF=$SLURM_CONF"

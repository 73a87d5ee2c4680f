#!/usr/bin/env bash
# mpirun across the local cluster's hosts: rsh agent into the namespaces, TCP on the bridge's
# subnet (Open MPI's shared-memory BTL crashes across namespaces, so btl self,tcp), ob1 PML.
#   usage: cluster/local/mpirun.sh [mpirun options] -np N PROGRAM [ARGS...]   (after cluster/local/up.sh)
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PMIX_MCA_gds=hash  # the shared-memory datastore complains inside containers
# rtc_hwloc_vmhole none: a remote orted shares its hwloc topology through shared memory mapped into
# the "biggest" hole of its address space; under ASLR that write sometimes lands on the stack and
# orted segfaults in hwloc_shmem_topology_write (3 of 12 launches here). A daemonized orted dies
# silently and mpirun then hangs, so also --leave-session-attached: a failed daemon is reported.
# mpi_yield_when_idle 1: every host's ranks share this machine's cores, which the hostfile's slots
# do not say, so Open MPI would spin without yielding in a blocking call (a reduction, a barrier)
# and hold a core that a peer needs: exchanges then took a scheduler tick (3.9 ms) where they take
# 50 us (bench a2a m2n, 2 hosts x 2 ranks on 2 cores).
exec mpirun --hostfile "$RUN_DIR/hostfile" --mca plm_rsh_agent "$HERE/rsh-agent.sh" --leave-session-attached \
  --mca rtc_hwloc_vmhole none \
  --mca oob_tcp_if_include "$SUBNET_PREFIX.0/24" --mca btl_tcp_if_include "$SUBNET_PREFIX.0/24" \
  --mca btl self,tcp --mca pml ob1 --mca plm_rsh_no_tree_spawn 1 \
  --mca mpi_yield_when_idle 1 --oversubscribe --bind-to none "$@"

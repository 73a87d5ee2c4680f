#!/usr/bin/env bash
# mpirun across the local cluster's hosts: rsh agent into the namespaces, TCP on the bridge's
# subnet (Open MPI's shared-memory BTL crashes across namespaces, so btl self,tcp), ob1 PML.
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PMIX_MCA_gds=hash  # the shared-memory datastore complains inside containers
exec mpirun --hostfile "$RUN_DIR/hostfile" --mca plm_rsh_agent "$HERE/rsh-agent.sh" \
  --mca oob_tcp_if_include "$SUBNET_PREFIX.0/24" --mca btl_tcp_if_include "$SUBNET_PREFIX.0/24" \
  --mca btl self,tcp --mca pml ob1 --mca plm_rsh_no_tree_spawn 1 \
  --oversubscribe --bind-to none "$@"

#!/bin/bash
# Across the local network-namespace cluster (2 hosts x 2 ranks, real TCP between distinct
# addresses): the all-to-all correctness test over UCX/tcp, a small `infer --a2a hier` equal to the
# single-process run, and a peer that dies mid-run: the survivors exit naming it (exit 5).
# Needs root for ip netns (CI runs as root); otherwise skipped with exit 77.
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
A2A_TEST=${MOERUN_A2A_TEST_BIN:?MOERUN_A2A_TEST_BIN must point at test_alltoallv}
if [ "$(id -u)" -ne 0 ] || ! command -v ip > /dev/null; then echo "SKIP: needs root and iproute2 for network namespaces"; exit 77; fi
export MOERUN_CLUSTER_RUN_DIR="$WORK/cluster" MOERUN_CLUSTER_NS_PREFIX="mrt$$-" MOERUN_CLUSTER_BRIDGE="mrtbr$$"
MOERUN_CLUSTER_BRIDGE=${MOERUN_CLUSTER_BRIDGE:0:15}
export MOERUN_CLUSTER_SUBNET="10.78.$(( $$ % 200 + 1 ))"
trap '"$ROOT/cluster/local/down.sh"; rm -rf "$WORK"' EXIT
"$ROOT/cluster/local/up.sh" 2 > /dev/null
CMPI="$ROOT/cluster/local/mpirun.sh"
UCX="-x UCX_TLS=tcp,self -x UCX_NET_DEVICES=eth0"
launched=0
launch_across_hosts "$WORK/true.err" timeout 30 "$CMPI" -np 2 --map-by ppr:1:node true > /dev/null && launched=1
check "mpirun reaches both namespace hosts" test "$launched" -eq 1

timeout 120 "$CMPI" -np 4 --map-by ppr:2:node $UCX -x MOERUN_TEST_TRANSPORT=ucx -x MOERUN_TEST_RANKS_PER_NODE=1,0 \
  "$A2A_TEST" < /dev/null > "$WORK/a2a.log" 2>&1 || tail -20 "$WORK/a2a.log"
check "a2a over UCX/tcp between 2 hosts matches MPI_Alltoallv" bash -c "[ \$(grep -c 'PASSED' '$WORK/a2a.log') -eq 4 ]"

synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 6 8
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet
launch_across_hosts "$WORK/infer.err" timeout 120 "$CMPI" -np 4 --map-by ppr:2:node $UCX "$MOERUN" infer --model "$WORK/m" \
  --input "$WORK/reqs.jsonl" --output "$WORK/out.jsonl" --a2a hier || true
check "infer --a2a hier across 2 hosts equals the single-process run" cmp -s "$WORK/ref.jsonl" "$WORK/out.jsonl"
check "layout shows 2 nodes from MPI_Comm_split_type" grep -q "on 2 node(s)" "$WORK/infer.err"

# A gateway dies mid-run (SIGKILL of rank 2, node 1's gateway for node 0). mpirun runs with
# --enable-recovery so that it does not kill the survivors itself: they must notice the dead peer
# (UCX error mode peer, or --comm-timeout) and exit naming it. (In recovery mode mpirun lingers after
# its processes are gone, so the test ends it once they are.)
requests "$WORK/long.jsonl" 40 30
"$CMPI" -np 4 --map-by ppr:2:node --enable-recovery $UCX "$MOERUN" infer --model "$WORK/m" \
  --input "$WORK/long.jsonl" --output "$WORK/dead.jsonl" --a2a hier --max-batch-size 1 --comm-timeout 15 \
  < /dev/null > /dev/null 2> "$WORK/dead.err" &
job=$!
for _ in $(seq 1 500); do [ -s "$WORK/dead.jsonl.journal" ] && break; sleep 0.02; done
rank_pids() {  # the job's MPI processes (not mpirun, whose command line matches too): "pid rank"
  for p in $(pgrep -f "moerun infer --model $WORK/m"); do
    r=$( (tr '\0' '\n' < /proc/$p/environ | sed -n 's/^OMPI_COMM_WORLD_RANK=//p') 2>/dev/null || true)
    [ -n "$r" ] && echo "$p $r"
  done
  return 0
}
victim=$(rank_pids | awk '$2 == 2 {print $1}')
start=$(date +%s)
kill -9 "$victim"
for _ in $(seq 1 300); do [ -z "$(rank_pids)" ] && break; sleep 0.1; done
took=$(( $(date +%s) - start ))
left=$(rank_pids | wc -l)
kill "$job" 2>/dev/null || true
wait "$job" 2>/dev/null || true
check "dead peer: survivors gone after ${took}s ($left left), named: $(grep -m1 'error: .*rank 2' "$WORK/dead.err")" \
  bash -c "[ $left -eq 0 ] && [ $took -le 25 ] && grep -q 'error: rank [0-9]: .*rank 2 is unreachable\|error: rank [0-9]: .*with rank 2 failed\|error: rank [0-9]: .*waiting for rank(s) 2' '$WORK/dead.err'"
finish

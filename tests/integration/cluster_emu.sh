#!/bin/bash
# The emulated cluster (cluster/local/up.sh --link, --node-memory, --node-cores): 2 hosts whose outgoing links are
# shaped to 200 Mbit/s and each in a memory cgroup of 2 GiB. A TCP stream between them runs at the
# shaped rate, processes mpirun.sh starts land in their host's group and read its limit, a small
# infer across both hosts equals the single-process run (each rank's budget half its host's limit),
# bench a2a's fit of the link predicts bench infer's exchange, each host can have a core of its own,
# and down.sh leaves no namespace, bridge, cgroup or cpuset behind.
# Needs root, iproute2's tc and the cgroup v1 memory controller; otherwise skipped with exit 77.
source "$(dirname "$0")/common.sh"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
if [ "$(id -u)" -ne 0 ] || ! command -v ip > /dev/null || ! command -v tc > /dev/null || [ ! -d /sys/fs/cgroup/memory ]; then
  echo "SKIP: needs root, iproute2 (ip, tc) and the cgroup v1 memory controller"; exit 77
fi
export MOERUN_CLUSTER_RUN_DIR="$WORK/cluster" MOERUN_CLUSTER_NS_PREFIX="mce$$-" MOERUN_CLUSTER_BRIDGE="mcebr$$"
MOERUN_CLUSTER_BRIDGE=${MOERUN_CLUSTER_BRIDGE:0:15}
export MOERUN_CLUSTER_SUBNET="10.80.$(( $$ % 200 + 1 ))"
source "$ROOT/cluster/local/config.sh"
trap '"$ROOT/cluster/local/down.sh"; rm -rf "$WORK"' EXIT
"$ROOT/cluster/local/up.sh" 2 --link 200mbit --node-memory 2G > "$WORK/up.log"
check "each host's link is shaped (tbf at 200 Mbit/s)" bash -c \
  "ip netns exec ${NS_PREFIX}1 tc qdisc show dev eth0 | grep -q 'tbf.*rate 200Mbit' && ip netns exec ${NS_PREFIX}2 tc qdisc show dev eth0 | grep -q 'tbf.*rate 200Mbit'"
ip netns exec "${NS_PREFIX}2" "$PY" "$(dirname "$0")/link_throughput.py" serve &
sleep 0.5
rate=$(timeout 30 ip netns exec "${NS_PREFIX}1" "$PY" "$(dirname "$0")/link_throughput.py" send "$SUBNET_PREFIX.2" 16)
check "a stream between the hosts runs at the shaped rate ($rate Mbit/s of 200)" "$PY" -c "import sys; assert 100 <= $rate <= 210, $rate"
check "each host's memory cgroup holds 2 GiB" bash -c \
  "[ \$(cat $CGROUP_ROOT/$CGROUP_GROUP/${NS_PREFIX}1/memory.limit_in_bytes) -eq 2147483648 ]"
CMPI="$ROOT/cluster/local/mpirun.sh"
timeout 60 "$CMPI" -np 2 --map-by ppr:1:node sh -c 'grep memory: /proc/self/cgroup' < /dev/null > "$WORK/groups.txt" 2>&1
check "processes mpirun.sh starts join their host's group" bash -c \
  "grep -q '/$CGROUP_GROUP/${NS_PREFIX}1\$' '$WORK/groups.txt' && grep -q '/$CGROUP_GROUP/${NS_PREFIX}2\$' '$WORK/groups.txt'"
timeout 60 "$CMPI" -np 2 --map-by ppr:1:node sh -c "cat $CGROUP_ROOT\$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)/memory.limit_in_bytes" \
  < /dev/null > "$WORK/limits.txt" 2>&1
check "a process on a host reads its host's limit, as on a real node ($(tr '\n' ' ' < "$WORK/limits.txt"))" bash -c \
  "[ \$(grep -c '^2147483648\$' '$WORK/limits.txt') -eq 2 ]"

synth_model "$WORK/m"
requests "$WORK/reqs.jsonl" 6 8
"$MOERUN" infer --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/ref.jsonl" --quiet
UCX="-x UCX_TLS=tcp,self -x UCX_NET_DEVICES=eth0"
launch_across_hosts "$WORK/infer.err" timeout 120 "$CMPI" -np 4 --map-by ppr:2:node $UCX "$MOERUN" infer --model "$WORK/m" \
  --input "$WORK/reqs.jsonl" --output "$WORK/out.jsonl" --stats-json "$WORK/stats.json" || true
check "infer across the 2 shaped hosts equals the single-process run" cmp -s "$WORK/ref.jsonl" "$WORK/out.jsonl"
check "each host's ranks divide its group's limit (--memory-budget auto: 1024 MiB a rank)" "$PY" -c "import json, sys
b = json.load(open(sys.argv[1]))['memory_budget']
assert b['bytes_per_rank'] == 1 << 30 and b['source'] == 'the cgroup memory limit / 2 ranks on this host', b" "$WORK/stats.json"
# Hosts with unlike rank counts (2 and 1): the host with one rank takes part in the node-memory
# gather too. It skipped it, and the set-up waited for it until --comm-timeout.
launch_across_hosts "$WORK/uneven.err" timeout 120 "$CMPI" -np 3 --host "$SUBNET_PREFIX.1:2,$SUBNET_PREFIX.2:1" $UCX "$MOERUN" infer \
  --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/uneven.jsonl" --comm-timeout 60 || true
check "infer on hosts of 2 and 1 ranks equals the single-process run" cmp -s "$WORK/ref.jsonl" "$WORK/uneven.jsonl"
# A router node apart: the router alone on host 1, both ranks of host 2 expert ranks.
launch_across_hosts "$WORK/apart.err" timeout 120 "$CMPI" -np 3 --host "$SUBNET_PREFIX.1:1,$SUBNET_PREFIX.2:2" $UCX "$MOERUN" infer \
  --model "$WORK/m" --input "$WORK/reqs.jsonl" --output "$WORK/apart.jsonl" --router-nodes 1 --comm-timeout 60 --stats-json "$WORK/apart.json" || true
check "infer with --router-nodes 1 (the router alone on host 1) equals the single-process run" cmp -s "$WORK/ref.jsonl" "$WORK/apart.jsonl"
check "with --router-nodes 1 the job has 1 router and 2 expert ranks" "$PY" -c "import json, sys
b = json.load(open(sys.argv[1]))['balance']
assert b['expert_ranks'] == 2, b['expert_ranks']" "$WORK/apart.json"

# The network model: bench a2a fits the shaped link (routers to expert ranks and back, as the MoE
# exchange sends), inspect predicts a decode step from the fit, and bench infer across the hosts counts the
# pairs the prediction counts and lands near it (the 20% check is docs/PERFORMANCE.md's, on an
# idle host; here the other tests share the cores).
launch_across_hosts "$WORK/a2a.err" timeout 120 "$CMPI" -np 4 --map-by ppr:2:node $UCX "$MOERUN" bench a2a --patterns m2n,n2m --algos mpi \
  --min-bytes 4096 --max-bytes 1048576 --iters 3 --json "$WORK/fit.json" > "$WORK/a2a.txt" || true
check "bench a2a across the hosts fits the link ($(grep -m1 'alpha-beta fit' "$WORK/a2a.txt"))" "$PY" -c "import json, sys
f = json.load(open(sys.argv[1]))
fit = [x for x in f['fits'] if x['algo'] == 'mpi' and x['pattern'] == 'm2n'][0]
# 200 Mbit/s is 25 MB/s a link; half of a router's rows stay on its host: about 50 MB/s a rank
assert f['nodes'] == 2 and 0.01 < fit['bandwidth_gbps'] < 0.1, fit" "$WORK/fit.json"
"$MOERUN" inspect --model "$WORK/m" --nodes 2 --ranks-per-node 2 --batch 3 --link-fit "$WORK/fit.json" > "$WORK/inspect.txt"
check "inspect --link-fit predicts a decode step's exchange ($(grep -m1 '^  mpi *dispatch' "$WORK/inspect.txt"))" \
  grep -q "^  mpi       dispatch by the m2n times (5 sizes; their line: alpha .*), combine by the n2m times (5 sizes; alpha .*): [0-9.]* ms per step" \
  "$WORK/inspect.txt"
launch_across_hosts "$WORK/bi.err" timeout 180 "$CMPI" -np 4 --map-by ppr:2:node $UCX "$MOERUN" bench infer --layers 2 --hidden 1024 --heads 2 \
  --intermediate 32 --kv-heads 1 --head-dim 32 --vocab 256 --batch 16 --prompt-len 1 --new-tokens 6 --no-baseline \
  --link-fit "$WORK/fit.json" --json "$WORK/bi.json" > "$WORK/bi.txt" || true
check "bench infer --link-fit: the pairs it measured are the ones predicted, the time within 4x ($(grep -m1 'against --link-fit' "$WORK/bi.txt" | grep -o 'measured [0-9.]* ms.*'))" \
  "$PY" -c "import json, sys
x = json.load(open(sys.argv[1]))['link_fit']
assert x['measured_pairs'] == x['predicted_pairs'] == 2 * 6 * 2, x
assert 1 / 4 < x['measured_s'] / x['predicted_s'] < 4, x" "$WORK/bi.json"

"$ROOT/cluster/local/down.sh"
check "down.sh leaves no namespace, bridge or cgroup behind" bash -c \
  "! ip netns list | grep -q '^${NS_PREFIX}' && ! ip link show '$BRIDGE' > /dev/null 2>&1 && [ ! -d '$CGROUP_ROOT/$CGROUP_GROUP' ]"
# A delay: netem where the kernel has it, else refused (exit 2, one line) rather than left out.
rc=0
"$ROOT/cluster/local/up.sh" 2 --link 200mbit,1ms > "$WORK/up2.log" 2> "$WORK/up2.err" || rc=$?
if [ "$rc" -eq 0 ]; then
  check "a link delay: netem before the bucket" bash -c "ip netns exec ${NS_PREFIX}1 tc qdisc show dev eth0 | grep -q 'netem.*delay 1ms'"
else
  check "a link delay without the kernel's netem: refused, exit 2 ($(cat "$WORK/up2.err"))" bash -c \
    "[ $rc -eq 2 ] && grep -q 'this kernel has no netem' '$WORK/up2.err' && ! ip netns list | grep -q '^${NS_PREFIX}'"
fi
"$ROOT/cluster/local/down.sh"
check "down.sh leaves no namespace, bridge or cgroup behind, again" bash -c \
  "! ip netns list | grep -q '^${NS_PREFIX}' && ! ip link show '$BRIDGE' > /dev/null 2>&1 && [ ! -d '$CGROUP_ROOT/$CGROUP_GROUP' ]"
# A cpuset per host: each host's processes on its own core, and more cores than the machine has refused.
cores=$(getconf _NPROCESSORS_ONLN)  # not nproc, which reads OMP_NUM_THREADS (1 under ctest)
if [ -d "$CPUSET_ROOT" ] && [ "$cores" -ge 2 ]; then
  "$ROOT/cluster/local/up.sh" 2 --node-cores 1 > "$WORK/up3.log"
  timeout 60 "$CMPI" -np 2 --map-by ppr:1:node sh -c 'echo $(hostname -I) $(sed -n "s/^Cpus_allowed_list:\t//p" /proc/self/status)' \
    < /dev/null > "$WORK/cpus.txt" 2> "$WORK/cpus.err"
  check "each host's processes run on a core of their own ($(tr '\n' ' ' < "$WORK/cpus.txt"))" bash -c \
    "[ \$(wc -l < '$WORK/cpus.txt') -eq 2 ] && [ \$(awk '{print \$2}' '$WORK/cpus.txt' | sort -u | wc -l) -eq 2 ] && ! grep -q '[-,]' '$WORK/cpus.txt'"
  rc=0
  "$ROOT/cluster/local/up.sh" $((cores + 1)) --node-cores 1 > /dev/null 2> "$WORK/up4.err" || rc=$?
  check "more cores than the machine has: refused, exit 2 ($(cat "$WORK/up4.err"))" bash -c "[ $rc -eq 2 ] && grep -q 'needs $((cores + 1)) cores' '$WORK/up4.err'"
  "$ROOT/cluster/local/down.sh"
  check "down.sh leaves no cpuset behind" bash -c "[ ! -d '$CPUSET_ROOT/$CGROUP_GROUP' ] && ! ip netns list | grep -q '^${NS_PREFIX}'"
fi
finish

# Names and addresses of the local test cluster (sourced by up.sh, down.sh, rsh-agent.sh, mpirun.sh).
NS_PREFIX=${MOERUN_CLUSTER_NS_PREFIX:-moerun-h}
BRIDGE=${MOERUN_CLUSTER_BRIDGE:-moerun-br0}
SUBNET_PREFIX=${MOERUN_CLUSTER_SUBNET:-10.77.0}
RUN_DIR=${MOERUN_CLUSTER_RUN_DIR:-/tmp/moerun-cluster}
# --node-memory: one cgroup v1 memory group per host under CGROUP_ROOT/CGROUP_GROUP.
CGROUP_ROOT=${MOERUN_CLUSTER_CGROUP_ROOT:-/sys/fs/cgroup/memory}
CGROUP_GROUP=${MOERUN_CLUSTER_CGROUP_GROUP:-$NS_PREFIX-cluster}
# --node-cores: one cgroup v1 cpuset per host under CPUSET_ROOT/CGROUP_GROUP.
CPUSET_ROOT=${MOERUN_CLUSTER_CPUSET_ROOT:-/sys/fs/cgroup/cpuset}

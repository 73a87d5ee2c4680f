# Names and addresses of the local test cluster (sourced by up.sh, down.sh, rsh-agent.sh, mpirun.sh).
NS_PREFIX=${MOERUN_CLUSTER_NS_PREFIX:-moerun-h}
BRIDGE=${MOERUN_CLUSTER_BRIDGE:-moerun-br0}
SUBNET_PREFIX=${MOERUN_CLUSTER_SUBNET:-10.77.0}
RUN_DIR=${MOERUN_CLUSTER_RUN_DIR:-/tmp/moerun-cluster}

# Settings of the local object store (sourced by start.sh and stop.sh).
OS_DIR=${MOERUN_OBJECTSTORE_DIR:-/tmp/moerun-objectstore}
OS_PORT=${MOERUN_S3_PORT:-8089}
OS_OBJECT_PORT=$((OS_PORT + 1))
OS_CONTAINER_PORT=$((OS_PORT + 2))
OS_ACCOUNT_PORT=$((OS_PORT + 3))
OS_MEMCACHED_PORT=$((OS_PORT + 4))
OS_REGION=us-east-1
# tempauth's account:user is the S3 access key, its password the secret (test credentials only).
OS_ACCESS_KEY=test:tester
OS_SECRET=testing

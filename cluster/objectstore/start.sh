#!/usr/bin/env bash
# A real S3-compatible object store on loopback for the tests and for trying `--model s3://`:
# OpenStack Swift (Debian's swift-proxy/-object/-container/-account) with the s3api middleware in
# front of tempauth, so requests must carry a valid AWS SigV4 signature. One replica, one device
# folder, rings on 127.0.0.1, workers = 0, memcached on loopback.
#   usage: cluster/objectstore/start.sh [--bucket NAME] [--upload MODEL_DIR PREFIX]
# Prints the environment to export (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
# AWS_REGION). Stop with stop.sh. State and logs live in $MOERUN_OBJECTSTORE_DIR
# (default /tmp/moerun-objectstore); the proxy listens on $MOERUN_S3_PORT (default 8089).
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/config.sh"
BUCKET="" UPLOAD_DIR="" UPLOAD_PREFIX=""
while [ $# -gt 0 ]; do
  case $1 in
    --bucket) BUCKET=$2; shift 2 ;;
    --upload) UPLOAD_DIR=$2; UPLOAD_PREFIX=$3; shift 3 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "objectstore/start.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$UPLOAD_DIR" ] && [ -z "$BUCKET" ] && BUCKET=moerun
if [ -n "$UPLOAD_DIR" ]; then
  if [ ! -f "$UPLOAD_DIR/model.h5" ]; then
    echo "objectstore/start.sh: $UPLOAD_DIR/model.h5: no such file (--upload takes a model directory)" >&2; exit 2
  fi
  UPLOAD_DIR=$(cd "$UPLOAD_DIR" && pwd)  # the script changes directory below
fi

missing=()
for p in swift-proxy swift-object swift-container swift-account memcached curl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" > /dev/null
fi

"$HERE/stop.sh" > /dev/null 2>&1 || true
rm -rf "$OS_DIR"
mkdir -p "$OS_DIR"/{etc,srv/d1,log,run}
user=$(id -un)

# Swift reads its hash suffix from this fixed path only.
if [ ! -s /etc/swift/swift.conf ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo mkdir -p /etc/swift
  printf '[swift-hash]\nswift_hash_path_suffix = moerun-test\n\n[storage-policy:0]\nname = Policy-0\ndefault = yes\n' |
    $sudo tee /etc/swift/swift.conf > /dev/null
fi

server_defaults() {  # server_defaults PORT: the [DEFAULT] section every server's config shares
  cat <<CONF
[DEFAULT]
devices = $OS_DIR/srv
mount_check = false
bind_ip = 127.0.0.1
bind_port = $1
workers = 0
user = $user
swift_dir = $OS_DIR/etc
log_level = INFO
CONF
}

cd "$OS_DIR/etc"
for ring in account:$OS_ACCOUNT_PORT container:$OS_CONTAINER_PORT object:$OS_OBJECT_PORT; do
  name=${ring%%:*} port=${ring##*:}
  swift-ring-builder "$name.builder" create 8 1 1 > /dev/null
  swift-ring-builder "$name.builder" add "r1z1-127.0.0.1:$port/d1" 100 > /dev/null
  swift-ring-builder "$name.builder" rebalance > /dev/null 2>&1 || true
  { server_defaults "$port"; cat <<CONF

[pipeline:main]
pipeline = $name-server

[app:$name-server]
use = egg:swift#$name
CONF
  } > "$name-server.conf"
done

{ server_defaults "$OS_PORT"; cat <<CONF

[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true

[filter:s3api]
use = egg:swift#s3api
location = $OS_REGION

[filter:tempauth]
use = egg:swift#tempauth
user_${OS_ACCESS_KEY%%:*}_${OS_ACCESS_KEY##*:} = $OS_SECRET .admin

[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$OS_MEMCACHED_PORT

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:gatekeeper]
use = egg:swift#gatekeeper

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:listing_formats]
use = egg:swift#listing_formats
CONF
} > proxy-server.conf

memcached -d -u "$user" -l 127.0.0.1 -p "$OS_MEMCACHED_PORT" -P "$OS_DIR/run/memcached.pid"
for s in account container object proxy; do
  # -v logs to the console, which goes to the log file: the tests count requests there.
  setsid swift-$s-server "$OS_DIR/etc/$s-server.conf" -v > "$OS_DIR/log/$s.log" 2>&1 < /dev/null &
  echo $! > "$OS_DIR/run/$s.pid"
done
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$OS_PORT/healthcheck" > /dev/null 2>&1 && break
  sleep 0.2
done
curl -sf "http://127.0.0.1:$OS_PORT/healthcheck" > /dev/null || {
  echo "objectstore/start.sh: the Swift proxy did not come up; logs in $OS_DIR/log" >&2; tail -5 "$OS_DIR"/log/*.log >&2; exit 1; }

# The access key has a colon (account:user), which curl's --user would split at: a netrc instead.
printf 'machine 127.0.0.1 login %s password %s\n' "$OS_ACCESS_KEY" "$OS_SECRET" > "$OS_DIR/etc/netrc"
chmod 600 "$OS_DIR/etc/netrc"
s3() {  # s3 METHOD PATH [curl args...]: one SigV4-signed request; fails on an HTTP error.
  local method=$1 path=$2; shift 2
  curl -sS --fail-with-body -X "$method" --aws-sigv4 "aws:amz:$OS_REGION:s3" --netrc-file "$OS_DIR/etc/netrc" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@" "http://127.0.0.1:$OS_PORT/$path"
}
if [ -n "$BUCKET" ]; then
  # The account's first request can race its autocreation; retry the bucket a few times.
  for i in 1 2 3 4 5; do s3 PUT "$BUCKET" -o /dev/null && break; sleep 0.5; [ $i -eq 5 ] && exit 1; done
fi
if [ -n "$UPLOAD_DIR" ]; then
  for f in "$UPLOAD_DIR"/model.h5 "$UPLOAD_DIR"/experts-*.h5; do
    s3 PUT "$BUCKET/$UPLOAD_PREFIX/$(basename "$f")" -T "$f" -o /dev/null
  done
  echo "# uploaded $UPLOAD_DIR to s3://$BUCKET/$UPLOAD_PREFIX" >&2
fi
cat <<ENV
export AWS_ENDPOINT_URL=http://127.0.0.1:$OS_PORT
export AWS_ACCESS_KEY_ID=$OS_ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$OS_SECRET
export AWS_REGION=$OS_REGION
ENV

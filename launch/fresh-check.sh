#!/usr/bin/env bash
# Runs both README commands the way a new user's machine would: builds a Debian 12 minbase root with
# debootstrap, copies this checkout in (tracked and untracked files, no build outputs), and runs
# launch/demo.sh and then launch/test.sh inside it with /proc, /sys and /dev bind-mounted. Not run
# in CI (it downloads a whole distribution); run it before resolving anything that touches
# dependencies. Needs root and about 10 GB free under the root directory.
#
# Usage: launch/fresh-check.sh [--root DIR] [--keep] [--only demo|test] [-- extra launch/test.sh args]
#   --root DIR   where to build the root (default /var/tmp/moerun-fresh-root; must not exist,
#                unless --reuse)
#   --reuse      reuse an existing root made by an earlier run (skips debootstrap; the checkout is
#                copied anew)
#   --keep       keep the root afterwards (default: unmount and delete it)
#   --only W     run only demo.sh or only test.sh
#   --ref REF    copy the committed tree of REF (e.g. HEAD) instead of the working tree
# Output: the log of each command under $ROOT_DIR.logs/ (next to the root), a summary on stdout.
# Exit status: 0 when both commands passed.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROOT_DIR=/var/tmp/moerun-fresh-root
KEEP=0 REUSE=0 ONLY="" REF=""
TEST_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --root) ROOT_DIR=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --reuse) REUSE=1; shift ;;
    --only) ONLY=$2; shift 2 ;;
    --ref) REF=$2; shift 2 ;;
    --) shift; TEST_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $ONLY in ""|demo|test) ;; *) echo "fresh-check: --only takes demo or test" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "fresh-check: needs root (debootstrap, chroot, bind mounts)" >&2; exit 2; }
case $ROOT_DIR in /|/tmp|/var/tmp|"") echo "fresh-check: refusing --root $ROOT_DIR" >&2; exit 2 ;; esac
LOGS=$ROOT_DIR.logs
mkdir -p "$LOGS"

# Every mount under the root (our binds, and what the tests mount there: /run/netns of the cluster
# test, Slurm's, ...) goes before the root does: deleting through a live /dev bind would delete the
# host's devices.
unmount_all() {
  local m
  for _ in 1 2 3; do
    for m in $(awk -v r="$ROOT_DIR" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts | sort -r); do
      umount -R "$m" 2>/dev/null || umount -R -l "$m" 2>/dev/null || true
    done
  done
}
cleanup() {
  unmount_all
  if awk -v r="$ROOT_DIR" '$2 == r || index($2, r "/") == 1 {found=1} END {exit !found}' /proc/mounts; then
    echo "fresh-check: something is still mounted under $ROOT_DIR; not deleting the root" >&2
    return
  fi
  if [ "$KEEP" -eq 0 ] && [ -d "$ROOT_DIR" ]; then rm -rf --one-file-system "$ROOT_DIR"; fi
}
trap cleanup EXIT

# The Debian mirrors this machine's own apt sources name (one-line .list and deb822 .sources files):
# the one serving bookworm, and the one serving bookworm-security. No host is named here.
apt_mirror() {  # apt_mirror SUITE
  python3 - "$1" /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources <<'PY'
import sys
suite, files = sys.argv[1], sys.argv[2:]
def entries(path):
    try:
        text = open(path).read()
    except OSError:
        return
    if path.endswith(".sources"):
        for block in text.split("\n\n"):
            f = {}
            for line in block.splitlines():
                if ":" in line and not line.lstrip().startswith("#"):
                    k, v = line.split(":", 1)
                    f[k.strip().lower()] = v.split()
            if "deb" in f.get("types", []) and f.get("enabled", ["yes"])[0] != "no":
                for uri in f.get("uris", []):
                    yield uri, f.get("suites", [])
    else:
        for line in text.splitlines():
            w = line.split("#", 1)[0].split()
            if not w or w[0] != "deb":
                continue
            w = w[1:]
            if w and w[0].startswith("["):  # [arch=... signed-by=...] options
                while w and not w[0].endswith("]"):
                    w = w[1:]
                w = w[1:]
            if len(w) >= 2:
                yield w[0], [w[1]]
for path in files:
    for uri, suites in entries(path):
        if suite in suites:
            print(uri.rstrip("/"))
            sys.exit(0)
sys.exit(1)
PY
}
MIRROR=$(apt_mirror bookworm) || { echo "fresh-check: no apt source of this machine serves bookworm (/etc/apt/sources.list, /etc/apt/sources.list.d/); add one" >&2; exit 2; }
SECURITY=$(apt_mirror bookworm-security) || SECURITY=""

if [ "$REUSE" -eq 1 ] && [ -x "$ROOT_DIR/bin/bash" ]; then
  echo "== reusing $ROOT_DIR" >&2
else
  [ -e "$ROOT_DIR" ] && { echo "fresh-check: $ROOT_DIR exists (remove it, or pass --reuse)" >&2; trap - EXIT; exit 2; }
  command -v debootstrap > /dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap > /dev/null; }
  echo "== debootstrap --variant=minbase bookworm $ROOT_DIR" >&2
  debootstrap --variant=minbase bookworm "$ROOT_DIR" "$MIRROR" > "$LOGS/debootstrap.log" 2>&1 || {
    tail -20 "$LOGS/debootstrap.log" >&2; exit 1; }
fi

# The machine's package-index settings (what a fresh machine of this kind would have): Debian's
# suites with security updates, apt's Acquire settings, pip's configuration, local certificate
# authorities, name resolution.
{
  echo "deb $MIRROR bookworm main"
  echo "deb $MIRROR bookworm-updates main"
  [ -n "$SECURITY" ] && echo "deb $SECURITY bookworm-security main"
} > "$ROOT_DIR/etc/apt/sources.list"
for f in /etc/apt/apt.conf.d/*; do
  grep -q '^Acquire' "$f" 2>/dev/null && cp "$f" "$ROOT_DIR/etc/apt/apt.conf.d/"
done
[ -f /etc/pip.conf ] && cp /etc/pip.conf "$ROOT_DIR/etc/pip.conf"
# Local certificate authorities (a site's proxy): ca-certificates adds them to the bundle when the
# project's scripts install it.
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$ROOT_DIR/usr/local/share/ca-certificates"
  cp -r /usr/local/share/ca-certificates/. "$ROOT_DIR/usr/local/share/ca-certificates/"
fi
cp /etc/resolv.conf "$ROOT_DIR/etc/resolv.conf" 2>/dev/null || true
cp /etc/hosts "$ROOT_DIR/etc/hosts"
PASS_ENV=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 TERM=dumb)
while IFS='=' read -r k v; do PASS_ENV+=("$k=$v"); done < <(env | grep -E '^(PIP_|https?_proxy|HTTPS?_PROXY|no_proxy|NO_PROXY)' || true)

# The checkout as git sees it: tracked and untracked-but-not-ignored files, so build outputs stay out.
rm -rf "$ROOT_DIR/src/moerun"
mkdir -p "$ROOT_DIR/src/moerun"
if [ -n "$REF" ]; then
  git -C "$SRC" archive --format=tar "$REF" | tar -xf - -C "$ROOT_DIR/src/moerun"
else
  (cd "$SRC" && git ls-files -co --exclude-standard -z | tar --null --ignore-failed-read -T - -cf - 2> /dev/null) |
    tar -xf - -C "$ROOT_DIR/src/moerun"
fi
# A git repository inside, as a clean clone has (some scripts ask git for the tree).
cp -a "$SRC/.git" "$ROOT_DIR/src/moerun/.git"

# The root bind-mounted onto itself: inside the chroot "/" is then a mount point, which `ip netns`
# (the cluster test) needs for its mount --make-rslave /.
mount --bind "$ROOT_DIR" "$ROOT_DIR"
mount --bind /proc "$ROOT_DIR/proc"
mount --rbind /sys "$ROOT_DIR/sys" && mount --make-rslave "$ROOT_DIR/sys"
mount --rbind /dev "$ROOT_DIR/dev" && mount --make-rslave "$ROOT_DIR/dev"

run_in_root() {  # run_in_root NAME COMMAND...
  local name=$1; shift
  echo "== $name (log: $LOGS/$name.log)" >&2
  local t0=$SECONDS rc=0
  chroot "$ROOT_DIR" /usr/bin/env -i "${PASS_ENV[@]}" bash -c 'cd /src/moerun && "$@"' bash "$@" > "$LOGS/$name.log" 2>&1 || rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s" | tee -a "$LOGS/summary.txt"
  [ "$rc" -eq 0 ] || tail -40 "$LOGS/$name.log" >&2
  return "$rc"
}
: > "$LOGS/summary.txt"
status=0
if [ "$ONLY" != test ]; then run_in_root demo launch/demo.sh || status=1; fi
if [ "$ONLY" != demo ]; then run_in_root test launch/test.sh "${TEST_ARGS[@]}" || status=1; fi
grep -E "tests passed|tests failed|Total Test time" "$LOGS/test.log" 2>/dev/null | tee -a "$LOGS/summary.txt" || true
echo "fresh-check: $( [ $status -eq 0 ] && echo PASSED || echo FAILED ) (logs in $LOGS)"
exit $status

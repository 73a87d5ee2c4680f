#!/bin/bash
# Output paths that atomic replacement would ruin: a device (a stand-in for /dev/null made with
# mknod in our temp dir, never the real /dev), a FIFO, a directory, a symlink, and outputs that are
# an input or each other. Each is refused with exit 2 before any work, and the file that was there
# is still what it was (a symlink is refused too: moerun never writes through a link; the links it
# finds at names it makes on its own are tests/integration/planted_links.sh's).
source "$(dirname "$0")/common.sh"
synth_model "$WORK/m"
requests "$WORK/in.jsonl" 2 2
cp "$WORK/in.jsonl" "$WORK/in.orig"

# refuse NAME PATTERN -- moerun args...: exit 2, one line matching PATTERN
refuse() {
  local name=$1 pattern=$2; shift 3
  local rc=0
  "$MOERUN" "$@" > /dev/null 2> "$WORK/err" || rc=$?
  if [ "$rc" -eq 2 ] && grep -q -- "$pattern" "$WORK/err" && [ "$(wc -l < "$WORK/err")" -eq 1 ]; then
    ok "$name (exit 2: $(cat "$WORK/err"))"
  else
    bad "$name: exit $rc, $(cat "$WORK/err")"
  fi
}
infer() { echo infer --model "$WORK/m" --input "$WORK/in.jsonl" --quiet; }
unchanged_input() { check "$1: the input is unchanged" cmp -s "$WORK/in.jsonl" "$WORK/in.orig"; }

# Devices and FIFOs, as every output option.
if [ "$(id -u)" -eq 0 ]; then
  mknod "$WORK/null" c 1 3
  for opt in --output --stats-json --trace --logits-out; do
    args=$(infer)
    [ "$opt" != --output ] && args="$args --output $WORK/o.jsonl"
    refuse "$opt to a character device" "$opt $WORK/null: is a character device" -- $args $opt "$WORK/null"
  done
  check "the device is still a device" test -c "$WORK/null"
  refuse "bench layer --json to a device" "--json $WORK/null: is a character device" -- bench layer --tokens 8 --json "$WORK/null"
  refuse "affinity build --out to a device" "--out $WORK/null: is a character device" -- affinity build --trace "$WORK/none.h5" --out "$WORK/null"
else
  bad "not root: mknod of the device stand-in needs root (CI runs as root)"
fi
mkfifo "$WORK/fifo"
refuse "--output to a FIFO" "--output $WORK/fifo: is a FIFO" -- $(infer) --output "$WORK/fifo"
check "the FIFO is still a FIFO" test -p "$WORK/fifo"
mkdir "$WORK/dir"
refuse "--stats-json to a directory" "is a directory" -- $(infer) --output "$WORK/o.jsonl" --stats-json "$WORK/dir"
# A journal path that is a FIFO must not block the run forever.
mkfifo "$WORK/o2.jsonl.journal"
rc=0
timeout 60 "$MOERUN" $(infer) --output "$WORK/o2.jsonl" --resume 2> "$WORK/err" || rc=$?
check "a FIFO where the journal goes: exit 2, no hang ($(cat "$WORK/err"))" bash -c "[ $rc -eq 2 ] && grep -q 'o2.jsonl.journal: is a FIFO; the journal must be a regular file' '$WORK/err'"

# Outputs that are inputs.
refuse "--output equal to --input" "--output $WORK/in.jsonl is the --input file" -- $(infer) --output "$WORK/in.jsonl"
unchanged_input "--output = --input"
ln -s in.jsonl "$WORK/link.jsonl"
refuse "--output a symlink to the input" "link.jsonl: is a symbolic link; moerun never writes through a link" -- $(infer) --output "$WORK/link.jsonl"
ln "$WORK/in.jsonl" "$WORK/hard.jsonl"
refuse "--output a hard link of the input" "is the --input file" -- $(infer) --output "$WORK/hard.jsonl"
refuse "--trace equal to --input" "--trace $WORK/in.jsonl is the --input file" -- $(infer) --output "$WORK/o.jsonl" --trace "$WORK/in.jsonl"
refuse "--stats-json equal to --output" "--stats-json and --output name the same file" -- $(infer) --output "$WORK/o.jsonl" --stats-json "$WORK/o.jsonl"
refuse "--output over the model" "--output $WORK/m/model.h5 is the --model file" -- $(infer) --output "$WORK/m/model.h5"
cp "$WORK/in.jsonl" "$WORK/x.jsonl.journal"
refuse "--input named like the output's journal" "would be overwritten by a side file of --output" -- \
  infer --model "$WORK/m" --input "$WORK/x.jsonl.journal" --output "$WORK/x.jsonl" --quiet
unchanged_input "all refusals"

# A symlink to a regular file is refused, and the file it points at keeps its bytes.
echo old > "$WORK/real.jsonl"
ln -s real.jsonl "$WORK/out-link.jsonl"
refuse "--output a symlink to a regular file" "out-link.jsonl: is a symbolic link" -- $(infer) --output "$WORK/out-link.jsonl"
check "the file the link points at is unchanged" bash -c "[ -L '$WORK/out-link.jsonl' ] && [ \"\$(cat '$WORK/real.jsonl')\" = old ]"
check "no temporary files left behind" bash -c "! ls '$WORK' | grep -q tmp"
finish

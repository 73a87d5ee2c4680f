#!/bin/bash
# Two builds' `moerun convert`, byte for byte: every Hugging Face checkpoint directory given (or found
# as *-hf under the folders given) converted by OLD and by NEW, with the same options; every file
# each writes (model.h5, experts-*.h5, the tokenizer files) must be identical, and so must the exit
# code and the messages. For refactors of convert/ (issue 81's split of hf_convert.cpp). The expert
# index (experts-index.bin) is left out: it records the files' inodes and times. Not in CI.
#   usage: launch/compare-converts.sh OLD_MOERUN NEW_MOERUN WORK_DIR DIR... [-- convert options]
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -uo pipefail
OLD=$1 NEW=$2 WORK=$3; shift 3
DIRS=() OPTS=()
while [ $# -gt 0 ]; do
  if [ "$1" = -- ]; then shift; OPTS=("$@"); break; fi
  DIRS+=("$1"); shift
done
mkdir -p "$WORK"
same=0 differ=0
for d in "${DIRS[@]}"; do
  for ck in $( [ -f "$d/config.json" ] && echo "$d" || ls -d "$d"/*-hf 2>/dev/null ); do
    name=$(basename "$ck")
    rm -rf "$WORK/old-$name" "$WORK/new-$name"
    "$OLD" convert --from-hf "$ck" --out "$WORK/old-$name" "${OPTS[@]}" > "$WORK/old-$name.log" 2>&1; a=$?
    "$NEW" convert --from-hf "$ck" --out "$WORK/new-$name" "${OPTS[@]}" > "$WORK/new-$name.log" 2>&1; b=$?
    # the paths, and the progress line's rate and ETA, differ by construction
    sed -i -e "s|$WORK/old-|$WORK/X-|g" -e 's|[0-9.]* MB/s  ETA [0-9.]* s||' "$WORK/old-$name.log"
    sed -i -e "s|$WORK/new-|$WORK/X-|g" -e 's|[0-9.]* MB/s  ETA [0-9.]* s||' "$WORK/new-$name.log"
    ok=1
    [ $a -eq $b ] && cmp -s "$WORK/old-$name.log" "$WORK/new-$name.log" || ok=0
    for f in $(ls "$WORK/old-$name" 2>/dev/null | grep -v '^experts-index.bin$'); do cmp -s "$WORK/old-$name/$f" "$WORK/new-$name/$f" || ok=0; done
    [ "$(ls "$WORK/old-$name" 2>/dev/null | wc -l)" = "$(ls "$WORK/new-$name" 2>/dev/null | wc -l)" ] || ok=0
    if [ $ok -eq 1 ]; then same=$((same + 1)); echo "same    $name (exit $a)"; else differ=$((differ + 1)); echo "DIFFERS $name (exit $a / $b)"; fi
  done
done
echo "$same same, $differ differ"
[ $differ -eq 0 ]

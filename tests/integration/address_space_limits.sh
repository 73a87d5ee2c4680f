#!/bin/bash
# An address-space limit (ulimit -v), issue 46: below what moerun needs to start it is one line and
# exit 2 before anything is written (it used to be a crash inside oneDNN or UCX, "libgomp: Thread
# creation failed" with the output lock left behind, or a multi-line PMIx abort, depending on the
# value); above it the run completes with the unlimited run's output; a model whose dense part does
# not fit what the limit leaves is refused naming the numbers. Not in the sanitizer pass: ASan
# reserves terabytes of shadow address space, so no limit can apply there.
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$MOERUN" synth --out m2 --layers 2 --experts 8 --top-k 2 --hidden 64 --intermediate 64 --heads 4 --kv-heads 2 --head-dim 16 \
  --vocab 128 --max-position 128 --gate-skew 1.5 --seed 3 --quiet
for i in 0 1 2 3; do echo "{\"id\": \"r$i\", \"prompt_tokens\": [1, $((i + 5)), 7], \"max_new_tokens\": 4}"; done > R
"$MOERUN" infer --model m2 --input R --output unlimited.jsonl --quiet

# run_limited KB MODEL: infer under `ulimit -v KB` into o.jsonl; sets rc, stderr in err
run_limited() {
  rm -f o.jsonl*
  set +e
  (ulimit -v "$1"; exec "$MOERUN" infer --model "$2" --input R --output o.jsonl --quiet) 2> err
  rc=$?
  set -e
}
# The values that crashed, aborted or left files before, several runs each (the failure moved
# with the address-space layout).
for kb in 100000 150000 200000 250000 260000 280000 300000 400000; do
  for run in 1 2; do
    run_limited $kb m2
    left=$(ls o.jsonl* 2>/dev/null | tr '\n' ' ' || true)
    if [ $rc -eq 2 ] && [ "$(wc -l < err)" -eq 1 ] && grep -q "the address-space limit (ulimit -v) is [0-9]* MiB; moerun needs at least" err &&
       [ -z "$left" ]; then
      ok "ulimit -v $kb (run $run): exit 2, one line, nothing left"
    else
      bad "ulimit -v $kb (run $run): exit $rc, $(wc -l < err) line(s), left [$left]: $(head -c 300 err)"
    fi
  done
done
# The floor printed is the one enforced: a limit at it runs, with the unlimited run's tokens.
floor_mib=$(sed -n 's/.*needs at least \([0-9]*\) MiB.*/\1/p' err)
for kb in $((floor_mib * 1024 + 1024)) 600000 800000; do
  for run in 1 2; do
    run_limited $kb m2
    check "ulimit -v $kb (run $run): completes with the unlimited run's output (exit $rc: $(head -c 200 err))" \
      bash -c "[ $rc -eq 0 ] && cmp -s o.jsonl unlimited.jsonl"
  done
done
# A dense part larger than what the limit leaves: refused naming both numbers, before loading.
"$MOERUN" synth --out big --layers 1 --experts 4 --top-k 2 --hidden 1024 --intermediate 64 --heads 8 --kv-heads 4 --head-dim 128 \
  --vocab 64000 --max-position 128 --quiet
run_limited 600000 big
check "dense weights beyond what ulimit -v leaves: exit 2 naming the numbers ($rc: $(head -c 300 err))" \
  bash -c "[ $rc -eq 2 ] && [ \$(wc -l < err) -eq 1 ] && grep -q 'big/model.h5: the dense weights need [0-9]* MiB in memory, more than the [0-9]* MiB the address-space limit (ulimit -v) leaves' err && ! ls o.jsonl* 2>/dev/null | grep -q ."
finish

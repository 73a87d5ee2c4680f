#!/bin/bash
# The scoring paths inside a memory budget (issue 63). Every scored token is a vocabulary row of
# logits (and with --save-logits or --kl-base more rows of it): under a budget a step scores at most
# a sixteenth of it, and those rows are reserved, so prompt_logprobs, logprobs, perplexity,
# --save-logits and --kl-base stay under the budget (peak RSS) and are never OOM-killed, with the
# unlimited run's results. A --memory-budget above the cgroup limit is clamped to it with one
# warning. Model: vocab 32000 (a logits row is 125 KiB), 8 requests of 120 prompt tokens.
source "$(dirname "$0")/common.sh"
cd "$WORK"
"$MOERUN" synth --out m --layers 2 --experts 8 --top-k 2 --hidden 512 --intermediate 1024 --heads 8 --kv-heads 4 \
  --head-dim 64 --vocab 32000 --max-position 256 --dtype bfloat16 --shards 2 --seed 3 --quiet
"$PY" - <<'PY'
import json, random
random.seed(1)
with open("S", "w") as f:
    for i in range(8):
        toks = [1] + [random.randrange(2, 32000) for _ in range(119)]
        f.write(json.dumps({"id": f"s{i}", "prompt_tokens": toks, "max_new_tokens": 4, "prompt_logprobs": 5, "logprobs": 5}) + "\n")
json.dump([random.randrange(2, 32000) for _ in range(1200)], open("T.json", "w"))
PY
"$MOERUN" infer --model m --input S --output unlimited.jsonl --quiet
"$MOERUN" perplexity --model m --tokens T.json --context 240 --save-logits base.h5 --json base.json --quiet > /dev/null

# run LIMIT_MIB CMD...: CMD in a fresh cgroup v1 group of LIMIT MiB ("-": none); sets rc, rss (peak
# RSS in MiB) and oom (the group's oom_kill count); stderr in err.
run() {
  local limit=$1; shift
  local cg=-
  if [ "$limit" != - ]; then
    cg=/sys/fs/cgroup/memory/moerun-scoring-$$-$RANDOM
    mkdir "$cg"
    echo $((limit << 20)) > "$cg/memory.limit_in_bytes"
  fi
  set +e
  /usr/bin/python3 - "$cg" "$@" <<'PY' > rss
import os, resource, subprocess, sys
cg = sys.argv[1]
def enter():
    if cg != "-":
        open(cg + "/cgroup.procs", "w").write(str(os.getpid()))
rc = subprocess.run(sys.argv[2:], stderr=open("err", "w"), stdout=open("out", "w"), preexec_fn=enter).returncode
print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
PY
  set -e
  read -r rc rss < rss
  oom=0
  if [ "$cg" != - ]; then
    oom=$(sed -n 's/^oom_kill \([0-9]*\)/\1/p' "$cg/memory.oom_control")
    for _ in $(seq 50); do rmdir "$cg" 2>/dev/null && break; sleep 0.1; done
  fi
}

run - "$MOERUN" infer --model m --input S --output b.jsonl --memory-budget 200M --max-batch-tokens 128
check "--memory-budget 200M, prompt_logprobs and logprobs: the unlimited run's results, peak RSS $rss MiB (exit $rc: $(head -c 200 err))" \
  bash -c "[ $rc -eq 0 ] && cmp -s b.jsonl unlimited.jsonl && [ $rss -le 200 ]"

if ! mkdir /sys/fs/cgroup/memory/moerun-scoring-probe-$$ 2>/dev/null; then
  echo "note: cannot make a cgroup under /sys/fs/cgroup/memory here: the cgroup checks did not run"
  finish
  exit $?
fi
rmdir /sys/fs/cgroup/memory/moerun-scoring-probe-$$

run 200 "$MOERUN" infer --model m --input S --output c.jsonl
check "cgroup 200 MiB, the automatic budget, default options: the unlimited run's results, peak RSS $rss MiB, oom_kill $oom (exit $rc: $(head -c 200 err))" \
  bash -c "[ $rc -eq 0 ] && cmp -s c.jsonl unlimited.jsonl && [ $rss -le 200 ] && [ $oom -eq 0 ]"
run 200 "$MOERUN" infer --model m --input S --output d.jsonl --memory-budget 2G --quiet
check "cgroup 200 MiB, --memory-budget 2G: clamped with one warning, the same results, peak RSS $rss MiB, oom_kill $oom ($(head -c 200 err))" \
  bash -c "[ $rc -eq 0 ] && cmp -s d.jsonl unlimited.jsonl && [ $rss -le 200 ] && [ $oom -eq 0 ] && [ \$(wc -l < err) -eq 1 ] &&
           grep -q 'warn: --memory-budget 2048 MiB is more than the cgroup memory limit allows (200 MiB); using 200 MiB' err"

run 210 "$MOERUN" perplexity --model m --tokens T.json --context 240 --kl-base base.h5 --max-batch-size 4 --json kl.json --quiet
check "cgroup 210 MiB, perplexity --kl-base: KL 0 against its own base, peak RSS $rss MiB, oom_kill $oom (exit $rc: $(head -c 200 err))" \
  bash -c "[ $rc -eq 0 ] && [ $rss -le 210 ] && [ $oom -eq 0 ] &&
           $PY -c \"import json, sys; k = json.load(open('kl.json'))['kl_divergence']; sys.exit(not (k['tokens'] == 600 and k['max'] == 0))\""
run 210 "$MOERUN" perplexity --model m --tokens T.json --context 240 --save-logits saved.h5 --max-batch-size 4 --json s.json --quiet
check "cgroup 210 MiB, perplexity --save-logits: the unlimited run's perplexity, peak RSS $rss MiB, oom_kill $oom (exit $rc: $(head -c 200 err))" \
  bash -c "[ $rc -eq 0 ] && [ $rss -le 210 ] && [ $oom -eq 0 ] && [ \"\$(grep -o '\"perplexity\": *[0-9.e+-]*' s.json)\" = \"\$(grep -o '\"perplexity\": *[0-9.e+-]*' base.json)\" ]"
# Where even the capped rows do not fit next to the rest: one line, exit 2, never an OOM kill.
run 210 "$MOERUN" perplexity --model m --tokens T.json --context 240 --kl-base base.h5
check "cgroup 210 MiB, perplexity --kl-base with 32 windows' KV reserved: exit 2, one line, oom_kill $oom ($(head -c 200 err))" \
  bash -c "[ $rc -eq 2 ] && [ \$(wc -l < err) -eq 1 ] && grep -q 'is too small' err && [ $oom -eq 0 ]"
finish

# Shared helpers for the end-to-end tests: a scratch directory, a small synthetic model, checks.
set -euo pipefail
MOERUN=${MOERUN_BIN:?MOERUN_BIN must point at the moerun binary}
PY=${MOERUN_PYTHON:-python3}
WORK=$(mktemp -d /tmp/moerun-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failures=0
passes=0

ok() { echo "ok   $*"; passes=$((passes + 1)); }
bad() { echo "FAIL $*"; failures=$((failures + 1)); }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
finish() { echo "$passes passed, $failures failed"; [ "$failures" -eq 0 ]; }

# synth_model DIR [extra synth options]
synth_model() {
  local dir=$1; shift
  "$MOERUN" synth --out "$dir" --layers ${SYNTH_LAYERS:-3} --experts 8 --top-k 2 --hidden ${SYNTH_HIDDEN:-64} --heads 4 --kv-heads 2 --head-dim ${SYNTH_HEAD_DIM:-16} \
    --intermediate ${SYNTH_FF:-96} --vocab 200 --max-position 256 --eos 199 --shards 2 --seed ${SYNTH_SEED:-11} --quiet "$@"
}

# expert_slot_bytes MODEL_DIR: one expert packed for this machine, what an L1 slot takes (from inspect)
expert_slot_bytes() {
  "$MOERUN" inspect --model "$1" | sed -n 's/.*, \([0-9]*\) ([^)]*) packed in memory.*/\1/p'
}

# requests FILE N MAX_NEW: N requests with prompts of varied length, ids r0..r{N-1}
requests() {
  local file=$1 n=$2 max_new=$3
  : > "$file"
  for i in $(seq 0 $((n - 1))); do
    local len=$(( (i * 7) % 13 + 1 )) toks="1"
    for j in $(seq 1 $((len - 1))); do toks="$toks, $(( (i * 31 + j * 17) % 198 + 1 ))"; done
    echo "{\"id\": \"r$i\", \"prompt_tokens\": [$toks], \"max_new_tokens\": $max_new}" >> "$file"
  done
}

# launch_across_hosts ERR_FILE CMD...: runs an mpirun across the local cluster's namespaces, once
# more when Open MPI's launch failed before any rank ran (about 1 in 6 here: "ORTE does not know how
# to route a message", a daemon's TCP connection refused), saying so; moerun's own failures are not
# retried. Its stderr goes to ERR_FILE (its tail printed on failure).
launch_across_hosts() {
  local err=$1; shift
  for attempt in 1 2; do
    "$@" < /dev/null 2> "$err" && return 0
    grep -qE "ORTE does not know how to route|unable to complete a TCP connection|ORTE was unable to reliably start" "$err" &&
      ! grep -q "moerun" "$err" && [ $attempt -eq 1 ] && { echo "note: Open MPI's launch failed before any rank ran; trying it once more"; continue; }
    tail -20 "$err"
    return 1
  done
}

# wait_for_results OUTPUT N PID: returns once OUTPUT's journal holds N results, PID has ended, or 15 s passed
wait_for_results() {
  for _ in $(seq 1 3000); do
    [ -s "$1.journal" ] && [ "$(wc -l < "$1.journal")" -ge "$2" ] && return 0
    kill -0 "$3" 2>/dev/null || return 0
    sleep 0.005
  done
}

# kill_after_journal OUTPUT N CMD...: runs CMD in the background and SIGKILLs it once OUTPUT's
# journal holds N results (or after 15 s)
kill_after_journal() {
  local out=$1 n=$2; shift 2
  "$@" &
  local pid=$!
  wait_for_results "$out" "$n" "$pid"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# same_logits REF_PREFIX GOT_PREFIX: every router's --logits-out file (PREFIX, PREFIX.1, ...), by
# request, bit for bit; prints how many rows are identical.
same_logits() {
  "$PY" - "$1" "$2" <<'PY'
import glob, json, sys
def load(prefix):
    out = {}
    for p in [prefix] + glob.glob(prefix + ".*"):
        for line in open(p):
            r = json.loads(line)
            out.setdefault(r["id"], []).append(r["logits"])
    return out
ref, got = load(sys.argv[1]), load(sys.argv[2])
diff = sum(a != b for k in ref for a, b in zip(ref[k], got.get(k, [])))
n = sum(len(v) for v in ref.values())
print(f"{n - diff} of {n} logit rows identical")
sys.exit(0 if ref.keys() == got.keys() and diff == 0 and all(len(ref[k]) == len(got[k]) for k in ref) else 1)
PY
}

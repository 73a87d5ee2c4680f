#!/bin/bash
# Bad input: each case must fail with one clear line naming the file/field, the documented exit
# code (2 usage, 3 bad input, 4 I/O), and no output file.
source "$(dirname "$0")/common.sh"
synth_model "$WORK/m"
requests "$WORK/good.jsonl" 3 4

# expect NAME CODE PATTERN -- moerun args...
expect() {
  local name=$1 code=$2 pattern=$3; shift 4
  rm -f "$WORK/out.jsonl" "$WORK/out.jsonl.journal"
  set +e
  "$MOERUN" "$@" 2> "$WORK/err" > /dev/null
  local rc=$?
  set -e
  local lines; lines=$(wc -l < "$WORK/err")
  if [ "$rc" -eq "$code" ] && grep -q -- "$pattern" "$WORK/err" && [ "$lines" -eq 1 ] && [ ! -e "$WORK/out.jsonl" ]; then
    ok "$name (exit $rc: $(cat "$WORK/err"))"
  else
    bad "$name: exit $rc (want $code), $lines line(s), output $( [ -e "$WORK/out.jsonl" ] && echo present || echo absent ): $(cat "$WORK/err")"
  fi
}
infer() { echo infer --model "$1" --input "$2" --output "$WORK/out.jsonl" --quiet; }

expect "missing model dir" 4 "does not exist" -- $(infer "$WORK/nope" "$WORK/good.jsonl")
cp -r "$WORK/m" "$WORK/trunc" && truncate -s 2000 "$WORK/trunc/model.h5"
expect "truncated model.h5" 3 "model.h5: not a readable HDF5 file" -- $(infer "$WORK/trunc" "$WORK/good.jsonl")
cp -r "$WORK/m" "$WORK/noshard" && rm "$WORK/noshard/experts-00001.h5"
expect "shard missing experts" 3 "is in no shard" -- $(infer "$WORK/noshard" "$WORK/good.jsonl")
cp -r "$WORK/m" "$WORK/nan"
"$PY" -c "
import h5py, numpy as np
with h5py.File('$WORK/nan/experts-00001.h5', 'r+') as f:
    g = f['layers/2/experts/5']; w = g['w3'][()]; w[7, 3] = np.nan; del g['w3']
    g.create_dataset('w3', data=w, chunks=w.shape)
"
# Always scanned as experts load (--check-weights is accepted but no longer needed).
expect "NaN expert weight" 3 "experts-00001.h5: /layers/2/experts/5/w3 contains NaN at \[7,3\]" -- \
  $(infer "$WORK/nan" "$WORK/good.jsonl")
expect "NaN expert weight, loaded through the cache" 3 "experts-00001.h5: /layers/2/experts/5/w3 contains NaN at \[7,3\]" -- \
  $(infer "$WORK/nan" "$WORK/good.jsonl") --l1-bytes 200K
cp -r "$WORK/m" "$WORK/changed"
"$PY" -c "
import h5py, numpy as np
with h5py.File('$WORK/changed/experts-00001.h5', 'r+') as f:
    g = f['layers/2/experts/5']; w = g['w3'][()]; w[7, 3] += 0.5; del g['w3']
    g.create_dataset('w3', data=w, chunks=w.shape)
"
expect "changed weight bytes fail the checksum" 3 "checksum mismatch" -- $(infer "$WORK/changed" "$WORK/good.jsonl")
cp -r "$WORK/m" "$WORK/densenan"
"$PY" -c "
import h5py, numpy as np
with h5py.File('$WORK/densenan/model.h5', 'r+') as f:
    w = f['layers/1/wo'][()]; w[2, 5] = np.inf; f['layers/1/wo'][...] = w
"
expect "Inf in a dense weight (always checked)" 3 "model.h5: /layers/1/wo contains Inf at \[2,5\]" -- $(infer "$WORK/densenan" "$WORK/good.jsonl")

printf '{"id": "a", "prompt_tokens": [1, 2]}\n{"id": "b", "prompt_tokens": [1, \n' > "$WORK/broken.jsonl"
expect "broken JSONL line" 3 "broken.jsonl: line 2: not valid JSON" -- $(infer "$WORK/m" "$WORK/broken.jsonl")
echo '{"id": "a", "prompt_tokens": [1, 200]}' > "$WORK/vocab.jsonl"
expect "token id >= vocab_size" 3 "line 1: prompt_tokens\[1\] = 200 is out of range \[0, 200)" -- $(infer "$WORK/m" "$WORK/vocab.jsonl")
echo '{"id": "a", "prompt_tokens": []}' > "$WORK/empty.jsonl"
expect "empty prompt" 3 "line 1: field prompt_tokens is empty" -- $(infer "$WORK/m" "$WORK/empty.jsonl")
echo '{"id": "a", "prompt_tokens": [1], "max_new_tokens": -2}' > "$WORK/neg.jsonl"
expect "max_new_tokens < 0" 3 "line 1: field max_new_tokens is -2" -- $(infer "$WORK/m" "$WORK/neg.jsonl")
expect "missing input file" 4 "nope.jsonl: cannot open input file" -- $(infer "$WORK/m" "$WORK/nope.jsonl")
rm -f "$WORK/out.jsonl"
set +e
"$MOERUN" infer --model "$WORK/m" --input "$WORK/good.jsonl" --output /nonexistent-dir/out.jsonl --quiet 2> "$WORK/err"
rc=$?
set -e
check "unwritable output path: exit 4, names the path" bash -c "[ $rc -eq 4 ] && grep -q '/nonexistent-dir/out.jsonl' '$WORK/err' && [ \$(wc -l < '$WORK/err') -eq 1 ]"
expect "unknown option is a usage error" 2 "unrecognised option\|unrecognized option" -- infer --model "$WORK/m" --bogus 1
expect "bad overflow policy is a usage error" 2 "--overflow must be reroute or drop" -- $(infer "$WORK/m" "$WORK/good.jsonl") --overflow spill

# Routing options outside the range where their arithmetic means anything.
expect "--capacity-factor 1e300" 2 "--capacity-factor-prefill (or --capacity-factor) must be in \[0, 1e+06\]" -- $(infer "$WORK/m" "$WORK/good.jsonl") --capacity-factor 1e300
expect "--capacity-factor inf" 2 "--capacity-factor-prefill (or --capacity-factor) must be in" -- $(infer "$WORK/m" "$WORK/good.jsonl") --capacity-factor inf
expect "--router-temperature 1e-45" 2 "--router-temperature must be in \[1e-06, 1e+06\]" -- $(infer "$WORK/m" "$WORK/good.jsonl") --router-temperature 1e-45
expect "--warmup-requests -1" 2 "--warmup-requests must be >= 0" -- $(infer "$WORK/m" "$WORK/good.jsonl") --l1-bytes 1M --warmup-requests -1
MOERUN_RANKS_PER_NODE=two expect "MOERUN_RANKS_PER_NODE not a count" 2 "MOERUN_RANKS_PER_NODE must be a rank count >= 1, not \"two\"" -- \
  $(infer "$WORK/m" "$WORK/good.jsonl")
expect "--a2a neither mpi nor hier" 2 "--a2a must be mpi or hier, not \"flat\"" -- $(infer "$WORK/m" "$WORK/good.jsonl") --a2a flat
expect "--device gpu" 2 "--device 'gpu': expected cpu or cuda" -- $(infer "$WORK/m" "$WORK/good.jsonl") --device gpu
# Without a GPU (or without CUDA in the build) --device cuda is a usage error saying which, never a crash.
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then
  expect "--device cuda without a GPU" 2 "--device cuda" -- $(infer "$WORK/m" "$WORK/good.jsonl") --device cuda
fi
# The CUDA backend library named by MOERUN_CUDA_BACKEND: missing is a usage error, not a library
# (a stand-in text file) an I/O error naming it; neither leaves an output.
MOERUN_CUDA_BACKEND="$WORK/no-such-lib.so" expect "--device cuda, backend library missing" 2 \
  "no-such-lib.so not found" -- $(infer "$WORK/m" "$WORK/good.jsonl") --device cuda
echo "not a shared library" > "$WORK/fake-backend.so"
MOERUN_CUDA_BACKEND="$WORK/fake-backend.so" expect "--device cuda, backend library unloadable" 4 \
  "cannot load .*fake-backend.so" -- $(infer "$WORK/m" "$WORK/good.jsonl") --device cuda
expect "synth --gate-topics without --gate-skew" 2 "--gate-topics needs --gate-skew" -- synth --out "$WORK/topics" --gate-topics 4 --quiet
expect "synth --family of an unknown family" 2 "--family \"llama\" is not one of" -- synth --out "$WORK/fam" --family llama --quiet
expect "synth --layer-mlp with an entry of neither kind" 2 "layer_mlp entry 1 is \"sparse\"" -- synth --out "$WORK/fam" --layer-mlp moe,sparse,moe,moe --quiet
expect "synth --layer-mlp of another length" 2 "layer_mlp has 2 entries for 4 layers" -- synth --out "$WORK/fam" --layer-mlp moe,dense --quiet
expect "synth --dense-intermediate without dense layers" 2 "--dense-intermediate needs --layer-mlp" -- synth --out "$WORK/fam" --dense-intermediate 64 --quiet
check "a refused synth writes nothing" test ! -e "$WORK/fam"
expect "--top-p-experts 0" 2 "--top-p-experts must be in (0, 1\]" -- $(infer "$WORK/m" "$WORK/good.jsonl") --top-p-experts 0
expect "--capacity-factor-decode -1" 2 "--capacity-factor-decode (or --capacity-factor) must be in" -- $(infer "$WORK/m" "$WORK/good.jsonl") --capacity-factor-decode -1
expect "--load-penalty nan" 2 "--load-penalty must be in" -- $(infer "$WORK/m" "$WORK/good.jsonl") --load-penalty nan
# The smallest temperature allowed still routes (argmax), with no NaN weights: the tokens are those
# of an ordinary run whose top-1 expert takes all the weight, and the run is deterministic.
"$MOERUN" infer --model "$WORK/m" --input "$WORK/good.jsonl" --output "$WORK/cold1.jsonl" --quiet --router-temperature 1e-6 --stats-json "$WORK/cold.stats"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/good.jsonl" --output "$WORK/cold2.jsonl" --quiet --router-temperature 1e-6
check "--router-temperature 1e-6 runs, deterministic, experts beyond 0 and 1 used" bash -c "cmp -s '$WORK/cold1.jsonl' '$WORK/cold2.jsonl' && \
  '$PY' -c \"import json,sys; s=json.load(open('$WORK/cold.stats')); c=s['expert_usage'][0]; sys.exit(0 if sum(1 for x in c if x) > 2 else 1)\""

# JSON numbers beyond their type: the line is named, and --skip-invalid can skip it.
printf '{"id": "a", "prompt_tokens": [1, 2]}\n{"id": "b", "prompt_tokens": [1], "temperature": 1e999}\n' > "$WORK/overflow.jsonl"
expect "temperature 1e999" 3 "overflow.jsonl: line 2: not valid JSON" -- $(infer "$WORK/m" "$WORK/overflow.jsonl")
echo '{"id": "a", "prompt_tokens": [1, 18446744073709551615]}' > "$WORK/bigtok.jsonl"
expect "token 2^64-1 reported as itself" 3 "line 1: prompt_tokens\[1\] = 18446744073709551615 is out of range" -- $(infer "$WORK/m" "$WORK/bigtok.jsonl")
echo '{"id": "a", "prompt_tokens": [1, 2], "max_new_tokens": 9223372036854775807}' > "$WORK/budget.jsonl"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/budget.jsonl" --output "$WORK/budget.out" --quiet
check "max_new_tokens near INT64_MAX runs to max_position" bash -c "'$PY' -c \"import json,sys; r=json.loads(open('$WORK/budget.out').read()); sys.exit(0 if r['finish_reason']=='eos' or len(r['output_tokens'])==256-2 else 1)\""

# Options of the other commands: usage errors, not crashes, overflows or OOM kills.
expect "inspect --context 2^62" 2 "--context is 4611686018427387904, at most" -- inspect --model "$WORK/m" --context 4611686018427387904
expect "inspect --batch 2^62" 2 "--batch is 4611686018427387904, at most" -- inspect --model "$WORK/m" --batch 4611686018427387904
expect "--template-timeout 0" 2 "--template-timeout must be in (0, 3600] seconds, not 0" -- $(infer "$WORK/m" "$WORK/good.jsonl") --template-timeout 0
expect "--template-memory 1M" 2 "--template-memory must be at least 64M" -- $(infer "$WORK/m" "$WORK/good.jsonl") --template-memory 1M
expect "--router-nodes beyond the job's nodes" 2 "--router-nodes 2 is not in \[0, 1\]: the job has 1 node(s)" -- $(infer "$WORK/m" "$WORK/good.jsonl") --router-nodes 2
expect "inspect --nodes 2^62" 2 "--nodes is 4611686018427387904, at most" -- inspect --model "$WORK/m" --nodes 4611686018427387904 --ranks-per-node 4
expect "inspect --node-memory 0" 2 "--node-memory must be a size > 0" -- inspect --model "$WORK/m" --node-memory 0
# --link-fit: a file that is not bench a2a's JSON is named with its field, and nothing is printed
echo '{"ranks": 4, "nodes": 2, "fits": [{"algo": "mpi", "pattern": "m2n", "alpha_us": "x"}]}' > "$WORK/fit-bad.json"
expect "inspect --link-fit, a field not a number" 3 "fit-bad.json: fits\[0\].alpha_us is \"x\", not a number" -- \
  inspect --model "$WORK/m" --link-fit "$WORK/fit-bad.json"
echo '{"ranks": 4, "nodes": 2, "fits": [{"algo": "mpi", "pattern": "zipf", "alpha_us": 1, "bandwidth_gbps": 1, "max_error": 0}]}' > "$WORK/fit-zipf.json"
expect "inspect --link-fit without the MoE's patterns" 3 "fit-zipf.json: fits has no m2n, n2m or uniform pattern" -- \
  inspect --model "$WORK/m" --link-fit "$WORK/fit-zipf.json"
expect "inspect --link-fit, a missing file" 4 "nope.json: " -- inspect --model "$WORK/m" --link-fit "$WORK/nope.json"
echo '{"ranks": 4, "nodes": 2, "fits": [{"algo": "mpi", "pattern": "m2n", "alpha_us": 1, "bandwidth_gbps": 1, "max_error": 0}],
  "rows": [{"algo": "mpi", "pattern": "m2n", "bytes_per_rank": 1024, "time_us": {"median": 0}}]}' > "$WORK/fit-row.json"
expect "inspect --link-fit, a measured time of 0" 3 "fit-row.json: rows\[0\]: 1024 bytes in 0 us is not a measured exchange" -- \
  inspect --model "$WORK/m" --link-fit "$WORK/fit-row.json"
# Counts and links no measurement gives (issue 77): before, 1e300 ranks printed as -2147483648.
linkfit() {  # linkfit NAME RANKS NODES ALPHA BANDWIDTH [ROWS]
  echo "{\"ranks\": $2, \"nodes\": $3, \"fits\": [{\"algo\": \"mpi\", \"pattern\": \"m2n\", \"alpha_us\": $4, \"bandwidth_gbps\": $5, \"max_error\": 0}]${6:-}}" > "$WORK/$1.json"
}
linkfit fit-r0 0 1 1 1
expect "inspect --link-fit, ranks 0" 3 "fit-r0.json: ranks is 0, not a whole number in \[2, " -- inspect --model "$WORK/m" --link-fit "$WORK/fit-r0.json"
linkfit fit-rbig 1e300 1 1 1
expect "inspect --link-fit, ranks 1e300" 3 "fit-rbig.json: ranks is 1e+300, not a whole number" -- inspect --model "$WORK/m" --link-fit "$WORK/fit-rbig.json"
linkfit fit-n 4 -1 1 1
expect "inspect --link-fit, nodes -1" 3 "fit-n.json: nodes is -1, not a whole number in \[1, 4\]" -- inspect --model "$WORK/m" --link-fit "$WORK/fit-n.json"
linkfit fit-bw 4 2 1 1e-300
expect "inspect --link-fit, bandwidth 1e-300" 3 "fit-bw.json: fits\[0\]: alpha 1 us, bandwidth 1e-300 GB/s and max_error 0 are not a link" -- \
  inspect --model "$WORK/m" --link-fit "$WORK/fit-bw.json"
linkfit fit-alpha 4 2 1e308 1
expect "inspect --link-fit, alpha 1e308" 3 "fit-alpha.json: fits\[0\]: alpha 1e+308 us" -- inspect --model "$WORK/m" --link-fit "$WORK/fit-alpha.json"
linkfit fit-twice 4 2 1 1 ', "rows": [{"algo": "mpi", "pattern": "m2n", "bytes_per_rank": 1024, "time_us": {"median": 5}}, {"algo": "mpi", "pattern": "m2n", "bytes_per_rank": 1024, "time_us": {"median": 6}}]'
expect "inspect --link-fit, the same size twice" 3 "fit-twice.json: rows: mpi m2n has 1024 bytes twice" -- inspect --model "$WORK/m" --link-fit "$WORK/fit-twice.json"
expect "bench a2a --skew nan" 2 "--skew must be in \[0, 100\]" -- bench a2a --skew nan
expect "bench a2a --max-bytes 10^12" 2 "--max-bytes 1000000000000 is more than this benchmark can hold" -- bench a2a --max-bytes 1000000000000
expect "bench layer --tokens -5" 2 "--tokens: -5 is not in" -- bench layer --tokens -5
expect "bench gemm --m 0" 2 "--m: 0 is not in \[1, 4096\]" -- bench gemm --m 0
expect "bench gemm --dtype fp16" 2 "--dtype takes fp32, bf16, q8, q4, int4, mxfp4 or fp8-block, not \"fp16\"" -- bench gemm --dtype fp16
expect "bench gemm --weight-mb beyond memory" 2 "--weight-mb 100000000 is more than half of this host's memory" -- bench gemm --weight-mb 100000000
expect "affinity show --top -1" 2 "--top must be >= 0" -- affinity show "$WORK/none.h5" --top -1
before=$(find /tmp -maxdepth 1 -name 'moerun-bench-*' | wc -l)
expect "bench infer with a bad option fails" 2 "--micro-batches must be in \[1, 64\]" -- bench infer --micro-batches -1 --no-baseline --layers 1 --hidden 64 --intermediate 64 --vocab 64 --head-dim 16 --heads 4 --kv-heads 2
check "a failed bench infer leaves no /tmp/moerun-bench-* behind" bash -c "[ \$(find /tmp -maxdepth 1 -name 'moerun-bench-*' | wc -l) -eq $before ]"

# Group commit: 2000 one-token requests, one fdatasync of the journal per step (batches of 32).
"$PY" -c "
for i in range(2000): print('{\"id\": \"q%d\", \"prompt_tokens\": [1, %d], \"max_new_tokens\": 1}' % (i, i % 190 + 2))" > "$WORK/many.jsonl"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/many.jsonl" --output "$WORK/many.out" --quiet --stats-json "$WORK/many.stats" --max-batch-size 32
check "2000 results journaled with at most one sync per step ($(grep -o '"syncs": [0-9]*' "$WORK/many.stats"))" \
  bash -c "'$PY' -c \"import json,sys; j=json.load(open('$WORK/many.stats'))['journal']; sys.exit(0 if j['results']==2000 and 2000//32 <= j['syncs'] <= 2000//32+2 else 1)\" && [ \$(wc -l < '$WORK/many.out') -eq 2000 ]"

# Scoring (issue 24): the top-K counts, and moerun perplexity's inputs and --kl-base.
printf '%s\n' '{"id": "a", "prompt_tokens": [1, 2], "logprobs": -1}' > "$WORK/lp-neg.jsonl"
printf '%s\n' '{"id": "a", "prompt_tokens": [1, 2], "prompt_logprobs": 201}' > "$WORK/lp-big.jsonl"
printf '%s\n' '{"id": "a", "prompt_tokens": [1, 2], "echo": "yes"}' > "$WORK/lp-echo.jsonl"
expect "logprobs negative" 3 "lp-neg.jsonl: line 1: field logprobs is -1, expected in \[0, 200\]" -- $(infer "$WORK/m" "$WORK/lp-neg.jsonl")
expect "prompt_logprobs beyond the vocabulary" 3 "line 1: field prompt_logprobs is 201, expected in \[0, 200\]" -- $(infer "$WORK/m" "$WORK/lp-big.jsonl")
expect "echo not a boolean" 3 "line 1: field echo is not true or false" -- $(infer "$WORK/m" "$WORK/lp-echo.jsonl")
ppl() { echo perplexity --model "$1" --json "$WORK/out.jsonl" --quiet; }
python3 -c "import json, random; random.seed(2); print(json.dumps([random.randrange(200) for _ in range(300)]))" > "$WORK/toks.json"
python3 -c "import json, random; random.seed(3); print(json.dumps([random.randrange(200) for _ in range(300)]))" > "$WORK/toks2.json"
printf '[1, 200, 3]' > "$WORK/toks-big.json"
printf 'the cat \xff sat' > "$WORK/latin1.txt"
expect "perplexity --text not UTF-8" 3 "latin1.txt: byte 8 is not UTF-8" -- $(ppl "$WORK/m") --text "$WORK/latin1.txt" --context 4
expect "perplexity --tokens beyond the vocabulary" 3 "toks-big.json: element 1 is 200, not a token id in \[0, 200)" -- $(ppl "$WORK/m") --tokens "$WORK/toks-big.json"
printf '[1, 2, 3]' > "$WORK/toks-short.json"
expect "perplexity text shorter than a window" 2 "the text has 3 tokens, fewer than one window (--context 64)" -- $(ppl "$WORK/m") --tokens "$WORK/toks-short.json" --context 64
expect "perplexity --context beyond max_position" 2 "--context 512 is longer than the model's max_position 256" -- $(ppl "$WORK/m") --tokens "$WORK/toks.json"
expect "perplexity --text and --tokens" 2 "give --text FILE or --tokens FILE (one of them)" -- $(ppl "$WORK/m") --tokens "$WORK/toks.json" --text "$WORK/latin1.txt"
expect "perplexity --stride beyond --context" 2 "--stride must be in \[1, --context\]" -- $(ppl "$WORK/m") --tokens "$WORK/toks.json" --context 64 --stride 65
"$MOERUN" perplexity --model "$WORK/m" --tokens "$WORK/toks.json" --context 64 --save-logits "$WORK/base.h5" --quiet
"$MOERUN" synth --out "$WORK/m100" --layers 1 --experts 2 --hidden 32 --heads 2 --kv-heads 1 --head-dim 16 --intermediate 32 \
  --vocab 100 --eos 99 --quiet
expect "--kl-base of another tokenization" 3 "base.h5: tokens differ" -- $(ppl "$WORK/m") --tokens "$WORK/toks2.json" --context 64 --kl-base "$WORK/base.h5"
expect "--kl-base of other windows" 3 "base.h5: context 64 / stride 64 differ from this run's 32 / 32" -- $(ppl "$WORK/m") --tokens "$WORK/toks.json" --context 32 --kl-base "$WORK/base.h5"
python3 -c "import json; print(json.dumps([t % 100 for t in json.load(open('$WORK/toks.json'))]))" > "$WORK/toks100.json"
expect "--kl-base of another model" 3 "base.h5: vocab_size 200 is not this model's 100" -- $(ppl "$WORK/m100") --tokens "$WORK/toks100.json" --context 64 --kl-base "$WORK/base.h5"
expect "--kl-base not HDF5" 3 "good.jsonl: not a readable HDF5 file" -- $(ppl "$WORK/m") --tokens "$WORK/toks.json" --context 64 --kl-base "$WORK/good.jsonl"
expect "--kl-base not a moe-logprobs file" 3 "model.h5: attribute format is \"moe-hdf5\", not \"moe-logprobs\"" -- $(ppl "$WORK/m") --tokens "$WORK/toks.json" --context 64 --kl-base "$WORK/m/model.h5"

# --skip-invalid turns bad lines into results carrying an error field.
printf '{"id": "a", "prompt_tokens": [1, 2], "max_new_tokens": 2}\nnot json\n' > "$WORK/mixed.jsonl"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/mixed.jsonl" --output "$WORK/mixed.out" --quiet --skip-invalid
check "--skip-invalid reports the bad line as a result with an error" \
  bash -c "[ \$(wc -l < '$WORK/mixed.out') -eq 2 ] && sed -n 2p '$WORK/mixed.out' | grep -q '\"error\":\"line 2: not valid JSON'"
# Invalid lines keep their own id when it parses; no two results ever share an id, even when a real
# id looks like a generated one.
printf '%s\n' '{"id": "a", "prompt_tokens": [1, 2], "max_new_tokens": 2}' '{"id": "b", "prompt_tokens": [1], "temperature": 1e999}' \
  '{"id": "c", "prompt_tokens": []}' '{"id": "a", "prompt_tokens": [3]}' 'not json' '{"id": "line:5", "prompt_tokens": [4], "max_new_tokens": 1}' \
  > "$WORK/ids.jsonl"
"$MOERUN" infer --model "$WORK/m" --input "$WORK/ids.jsonl" --output "$WORK/ids.out" --quiet --skip-invalid
check "--skip-invalid: ids kept where they parse, all unique ($(grep -o '"id":"[^"]*"' "$WORK/ids.out" | tr '\n' ' '))" \
  bash -c "[ \"\$(grep -o '\"id\":\"[^\"]*\"' '$WORK/ids.out' | tr '\n' ' ')\" = '\"id\":\"a\" \"id\":\"line:2\" \"id\":\"c\" \"id\":\"line:4\" \"id\":\"line:5#2\" \"id\":\"line:5\" ' ] && \
    sed -n 3p '$WORK/ids.out' | grep -q 'prompt_tokens is empty' && sed -n 4p '$WORK/ids.out' | grep -q 'repeats line 1'"
finish

#!/usr/bin/env bash
# A/B of two moerun binaries, interleaved (docs/log/performance-2026.md, "One stream at every row count"):
#   docs/data/2026-12-03-d65fe93-decode-one-stream/ab.sh OLD_BINARY NEW_BINARY > ab.txt
# 1. bench gemm at M = 1, 2, 4 (512 MB of matrices: from memory) and 16, 64 (128 MB), 6 runs each;
# 2. moerun infer on bench-peer's Mixtral-shaped q4 and q8 models (launch/bench-peer.sh --dtypes q8,q4
#    made them, and the bench-N.jsonl requests) with the dense layers quantized alike, 3 runs.
# Lines: gemm BIN DTYPE M MS FRACTION_OF_READ_OR_GFLOPS / infer BIN DTYPE N DECODE_TOK_S PREFILL_TOK_S.
set -euo pipefail
OLD=$1 NEW=$2
W=${MOERUN_PEER_WORK:-$(cd "$(dirname "$0")/../../.." && pwd)/build/peer/work}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=2
for i in 1 2 3 4 5 6; do
  for b in OLD NEW; do
    "${!b}" bench gemm --dtype bf16,q8,q4,mxfp4,fp8 --m 1,2,4 --iters 3 |
      awk -v b=$b '$1 ~ /^(bf16|q8|q4|fp8|mxfp4)$/ {print "gemm", b, $1, $2, $4, $6}'
    "${!b}" bench gemm --dtype q8,q4,mxfp4,fp8 --m 16,64 --iters 3 --weight-mb 128 |
      awk -v b=$b '$1 ~ /^(q8|q4|fp8|mxfp4)$/ {print "gemm", b, $1, $2, $4, $7}'
  done
done
for run in 1 2 3; do for dt in q4 q8; do for n in 1 8 32; do for b in OLD NEW; do
  "${!b}" infer --model "$W/mixtral-$dt" --input "$W/bench-$n.jsonl" --output "$T/out.jsonl" --stats-json "$T/st.json" \
    --quiet --max-batch-size $n --quantize-dense $dt
  python3 -c "import json,sys; t = json.load(open(sys.argv[1]))['throughput']; \
print('infer $b $dt $n', round(t['decode_tokens'] / t['decode_seconds'], 1), round(t['prefill_tokens'] / t['prefill_seconds'], 1))" "$T/st.json"
done; done; done; done

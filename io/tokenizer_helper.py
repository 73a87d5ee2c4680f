# The Python side of io/tokenizer.cpp for tokenizer.json files: Hugging Face's `tokenizers`
# library, driven over stdin/stdout with one JSON object per line. Embedded into the moerun binary
# at build time and run as `python3 -c <this> TOKENIZER_JSON`.
#   -> {"ready": true, "vocab_size": N}            once, at start
#   <- {"op": "encode", "texts": [...]}  -> {"ids": [[...], ...]}       (special tokens added, as HF does)
#   <- {"op": "decode", "ids": [[...]]}  -> {"texts": [...]}            (special tokens skipped)
#   <- {"op": "encode_rendered", "texts": [...]} -> {"ids": [[...], ...]}  (no special tokens added: chat
#      templates' output, as apply_chat_template(tokenize=True) encodes it; io/chat_template_helper.py renders)
#   <- {"op": "max_token_bytes"}         -> {"bytes": N}   (an upper bound on any token's text in bytes)
#   <- {"op": "token_bytes"}             -> {"bytes": [hex, ...]}        (each id's bytes, special tokens none)
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
def token_bytes():
    """The bytes each id decodes to alone: byte-level BPE tokens through GPT-2's byte alphabet,
    byte-fallback pieces (<0xNN>) as that byte, Metaspace's U+2581 as a space, special tokens none."""
    spec = json.loads(tok.to_str())
    decoders = [spec.get("decoder") or {}]
    while decoders and decoders[0].get("type") == "Sequence":
        decoders = decoders[0].get("decoders", [])
    byte_level = any(d.get("type") == "ByteLevel" for d in decoders)
    chars = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + list(range(ord("\xae"), ord("\xff") + 1))
    codes, n = chars[:], 0
    for b in range(256):
        if b not in chars:
            chars.append(b)
            codes.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(chars, codes)}
    special = {t["id"] for t in spec.get("added_tokens", []) if t.get("special")}
    out = []
    for i in range(tok.get_vocab_size(with_added_tokens=True)):
        t = tok.id_to_token(i)
        if t is None or i in special:
            out.append("")
        elif byte_level and all(c in byte_of for c in t):
            out.append(bytes(byte_of[c] for c in t).hex())
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            out.append(t[3:5].lower())
        else:
            out.append(t.replace("\u2581", " ").encode("utf-8").hex())
    return out


for line in sys.stdin:
    try:
        req = json.loads(line)
        if req["op"] == "encode":
            out = {"ids": [e.ids for e in tok.encode_batch(req["texts"], add_special_tokens=True)]}
        elif req["op"] == "decode":
            out = {"texts": tok.decode_batch(req["ids"], skip_special_tokens=True)}
        elif req["op"] == "token_bytes":
            out = {"bytes": token_bytes()}
        elif req["op"] == "encode_rendered":
            out = {"ids": [e.ids for e in tok.encode_batch(req["texts"], add_special_tokens=False)]}
        elif req["op"] == "max_token_bytes":
            out = {"bytes": max([len(t.encode("utf-8")) for t in tok.get_vocab(with_added_tokens=True)] + [1])}
        else:
            out = {"error": f"unknown op {req['op']!r}"}
    except Exception as e:
        out = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()

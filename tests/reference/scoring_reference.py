#!/usr/bin/env python3
"""Scoring against Hugging Face transformers (issue 24).

For tiny random Mixtral, Qwen2-MoE and OLMoE models made by transformers and converted:
  1. prompt and output log-probs (`"prompt_logprobs"`, `"logprobs"` in the JSONL interface) equal
     log_softmax of transformers' logits at every position to 1e-4, top-K included, in one process
     and under mpirun -np 4, with the prefix cache off and on (a cached prefix still returns its
     log-probs);
  2. `moerun perplexity` equals a float64 perplexity computed from transformers' logits on the same
     windows (1e-4 relative), stride default and 8, and gives the same number at np 1, 4 and 8
     (two routers at np 8); --text through the model's tokenizer equals --tokens of the same ids;
  3. --save-logits / --kl-base: KL divergence of a model against itself is exactly 0 with top-1
     agreement 1; against a bf16 copy (`convert --dtype bfloat16`) it is small and positive;
  4. bad input: logprobs negative or beyond the vocabulary, a --kl-base from another model or another
     tokenization (refused, naming the mismatch), a --text that is not UTF-8.

usage: scoring_reference.py MOERUN_BIN WORKDIR [FIGURES.txt]
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from hf_convert_reference import families, make_model
from reference_common import run

TOL = 1e-4
WORDS = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "red", "blue", "big", "small", "house", "tree", "and",
         "is", "was", "it", "he", "she", "they", "we", "you", "one", "two", "three", "four", "five", "yes", "no", "up"]
MPI = os.environ.get("MPIEXEC", "mpirun")
# The tokenizer helper of --text runs in this interpreter (it has the tokenizers package).
os.environ["MOERUN_PYTHON"] = sys.executable
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def mpirun(np_, args):
    return run([MPI, "--oversubscribe", "--bind-to", "none", "-np", str(np_)] + args, env=MPI_ENV)


def save_tokenizer(hf_dir, vocab_size, bos, eos):
    """A word-level tokenizer.json of WORDS (ids 3..), with [UNK]=0 and the model's BOS/EOS, saved as
    transformers saves a fast tokenizer (tokenizer.json + tokenizer_config.json)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {"[UNK]": 0, "<s>": bos, "</s>": eos}
    for i, w in enumerate(WORDS):
        vocab[w] = 3 + i
    for i in range(vocab_size):  # no holes: every id has a token
        if i not in vocab.values():
            vocab[f"[{i}]"] = i
    assert len(vocab) == vocab_size
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="[UNK]").save_pretrained(hf_dir)


def hf_log_softmax(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].double()
    return torch.log_softmax(logits, dim=-1).numpy()


def check_scored(check, tag, model, requests, results):
    """Every prompt and output entry of every result against transformers' log_softmax."""
    worst, top_ok = 0.0, True
    for req in requests:
        res = results[req["id"]]
        ids = req["prompt_tokens"] + res["output_tokens"]
        lsm = hf_log_softmax(model, ids)
        P = len(req["prompt_tokens"])
        entries = [(j, e) for j, e in enumerate(res.get("prompt_logprobs", []))]  # predicts token j + 1 from row j
        entries += [(P - 1 + i, e) for i, e in enumerate(res.get("logprobs", []))]
        want_prompt = P - 1 if req.get("prompt_logprobs") is not None else 0
        check(len(res.get("prompt_logprobs", [])) == want_prompt and len(res.get("logprobs", [])) == (
            len(res["output_tokens"]) if req.get("logprobs") is not None else 0), f"{tag}: {req['id']}: one entry per token")
        for row, e in entries:
            assert e["token"] == ids[row + 1]
            worst = max(worst, abs(e["logprob"] - lsm[row, e["token"]]))
            order = np.argsort(-lsm[row], kind="stable")
            for rank, (tid, lp) in enumerate(e["top"]):
                worst = max(worst, abs(lp - lsm[row, tid]))
                # The same ranking, except where transformers' own values are within the tolerance.
                top_ok &= tid == order[rank] or abs(lsm[row, order[rank]] - lsm[row, tid]) < TOL
    check(worst <= TOL and top_ok, f"{tag}: log-probs equal transformers' log_softmax (worst |diff| {worst:.2e}), top-K ranked alike")


def read_results(path):
    return {json.loads(l)["id"]: json.loads(l) for l in open(path)}


def jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def ppl_reference(model, tokens, context, stride):
    """Float64 perplexity of transformers' logits over moerun's windows (runtime/perplexity.hpp)."""
    stride = stride or context
    first = max(context // 2, context - stride)
    nll = []
    for start in range(0, len(tokens) - context + 1, stride):
        w = tokens[start:start + context]
        lsm = hf_log_softmax(model, w)
        nll += [-lsm[j - 1, w[j]] for j in range(first, context)]
    return float(np.exp(np.mean(nll))), len(nll)


def main():
    moerun, work = sys.argv[1], sys.argv[2]
    figures = sys.argv[3] if len(sys.argv) > 3 else None
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures, notes = [], []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    rng = np.random.default_rng(5)
    base_prompt = [int(x) for x in rng.integers(3, 120, 12)]
    requests = [
        {"id": "a", "prompt_tokens": base_prompt, "max_new_tokens": 4, "prompt_logprobs": 3, "logprobs": 2},
        {"id": "b", "prompt_tokens": base_prompt[:9] + [7, 8, 9], "max_new_tokens": 3, "prompt_logprobs": 1, "logprobs": 0},
        {"id": "c", "prompt_tokens": base_prompt[:8] + [5], "max_new_tokens": 0, "prompt_logprobs": 5},
        {"id": "d", "prompt_tokens": [int(x) for x in rng.integers(3, 120, 20)], "max_new_tokens": 2, "echo": True, "logprobs": 4},
        {"id": "e", "prompt_tokens": base_prompt, "max_new_tokens": 3},  # no scoring: no fields
    ]
    for r in requests:
        if r.get("echo"):
            r["prompt_logprobs"] = r["logprobs"]
    reqs = os.path.join(work, "requests.jsonl")
    jsonl(reqs, [{k: v for k, v in r.items() if not (k == "prompt_logprobs" and r.get("echo"))} for r in requests])
    ppl_tokens = [int(x) for x in rng.integers(3, 120, 300)]
    tok_file = os.path.join(work, "tokens.json")
    json.dump(ppl_tokens, open(tok_file, "w"))

    models = {}
    for fam in ("mixtral", "qwen2_moe", "olmoe"):
        cls, cfg = families()[fam]
        model = make_model(cls, cfg, seed=11)
        hf_dir, moe_dir = os.path.join(work, fam + "-hf"), os.path.join(work, fam + "-moe")
        model.save_pretrained(hf_dir, safe_serialization=True)
        save_tokenizer(hf_dir, cfg.vocab_size, cfg.bos_token_id, cfg.eos_token_id)
        r = run([moerun, "convert", "--from-hf", hf_dir, "--out", moe_dir, "--quiet"])
        check(r.returncode == 0, f"{fam}: convert ({r.stderr.strip()[-200:]})")
        if r.returncode:
            continue
        models[fam] = (model, hf_dir, moe_dir)
        runs = {"np1": None, "np4": None, "np1-one-by-one": None, "np1-prefix": None, "np4-prefix": None}
        for name in runs:
            out = os.path.join(work, f"{fam}-{name}.jsonl")
            args = [moerun, "infer", "--model", moe_dir, "--input", reqs, "--output", out, "--quiet"]
            if "prefix" in name or "one-by-one" in name:  # one request at a time, so that prefixes are cached
                args += ["--max-batch-size", "1"]
            if "prefix" in name:
                args += ["--prefix-cache-mb", "1", "--prefix-cache-block", "4"]
            r = mpirun(4, args) if name.startswith("np4") else run(args)
            check(r.returncode == 0, f"{fam}: infer {name} ({r.stderr.strip()[-300:]})")
            if r.returncode == 0:
                runs[name] = read_results(out)
                check_scored(check, f"{fam} {name}", model, requests, runs[name])
        res = runs["np1"]
        if res:
            check("prompt_logprobs" not in res["e"] and "logprobs" not in res["e"], f"{fam}: a request without scoring gets no fields")
            check(res["c"]["output_tokens"] == [] and len(res["c"]["prompt_logprobs"]) == 8, f"{fam}: max_new_tokens 0 scores the prompt only")
            check(len(res["b"]["logprobs"][0]["top"]) == 0 and len(res["a"]["prompt_logprobs"][0]["top"]) == 3, f"{fam}: top-K as asked")
        if runs["np1-prefix"] and runs["np1-one-by-one"]:
            same = all(runs["np1-prefix"][k].get("prompt_logprobs") == runs["np1-one-by-one"][k].get("prompt_logprobs") for k in "abcd")
            check(same, f"{fam}: the prefix cache changes no prompt log-prob (bit for bit)")

        # Perplexity against the float64 reference, and across layouts.
        for stride in (0, 8):
            want, n = ppl_reference(model, ppl_tokens, 32, stride)
            got = {}
            # One router and one micro-batch, as the single process: the same GEMM shapes, the same bits.
            # Two routers split the windows, so their batches (and GEMM shapes) differ: rounding only.
            layouts = {"np 1": (1, []), "np 4": (4, ["--micro-batches", "1"]), "np 8": (8, ["--micro-batches", "1"]),
                       "np 8, two routers": (8, ["--routers-per-node", "2"])}
            for name, (np_, extra) in layouts.items():
                js = os.path.join(work, f"{fam}-ppl-{stride}-{name.replace(' ', '').replace(',', '-')}.json")
                args = [moerun, "perplexity", "--model", moe_dir, "--tokens", tok_file, "--context", "32", "--stride", str(stride),
                        "--json", js, "--quiet", "--max-batch-tokens", "64"] + extra
                r = run(args) if np_ == 1 else mpirun(np_, args)
                check(r.returncode == 0, f"{fam}: perplexity stride {stride} {name} ({r.stderr.strip()[-300:]})")
                if r.returncode == 0:
                    got[name] = json.load(open(js))["perplexity"], json.load(open(js))["tokens"]
            if "np 1" in got:
                p1, n1 = got["np 1"]
                rel = abs(p1 - want) / want
                check(rel <= TOL and n1 == n,
                      f"{fam}: perplexity (stride {stride}) {p1:.6f} vs float64 transformers {want:.6f} (relative {rel:.1e}, {n} tokens)")
                same = [got.get(k, (None,))[0] for k in ("np 1", "np 4", "np 8")]
                check(same[0] == same[1] == same[2], f"{fam}: the same perplexity at np 1, 4, 8, bit for bit: {same}")
                two = got.get("np 8, two routers", (0,))[0]
                check(abs(two - p1) / p1 <= 1e-7, f"{fam}: two routers: {two!r} (relative {abs(two - p1) / p1:.1e})")

    # --text through the tokenizer, KL divergence, bad input: on the Mixtral model.
    if "mixtral" in models:
        model, hf_dir, moe_dir = models["mixtral"]
        from transformers import AutoTokenizer
        text = " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), 200))
        text_file = os.path.join(work, "text.txt")
        open(text_file, "w").write(text)
        ids = AutoTokenizer.from_pretrained(hf_dir)(text)["input_ids"]
        ids_file = os.path.join(work, "text-ids.json")
        json.dump(ids, open(ids_file, "w"))
        pj = {}
        for kind, src in (("text", text_file), ("tokens", ids_file)):
            pj[kind] = os.path.join(work, f"ppl-{kind}.json")
            r = run([moerun, "perplexity", "--model", moe_dir, "--" + kind, src, "--context", "32", "--json", pj[kind], "--quiet"])
            check(r.returncode == 0, f"perplexity --{kind} ({r.stderr.strip()[-300:]})")
        if all(os.path.exists(p) for p in pj.values()):
            a, b = json.load(open(pj["text"])), json.load(open(pj["tokens"]))
            check(a["perplexity"] == b["perplexity"] and a["tokens"] == b["tokens"],
                  f"--text (tokenized by moerun) equals --tokens of transformers' ids: {a['perplexity']} / {b['perplexity']}")

        base = os.path.join(work, "base-logprobs.h5")
        r = run([moerun, "perplexity", "--model", moe_dir, "--tokens", tok_file, "--context", "32", "--save-logits", base, "--quiet"])
        check(r.returncode == 0 and os.path.exists(base), f"--save-logits ({r.stderr.strip()[-200:]})")
        kl_self = os.path.join(work, "kl-self.json")
        r = mpirun(8, [moerun, "perplexity", "--model", moe_dir, "--tokens", tok_file, "--context", "32", "--kl-base", base,
                       "--json", kl_self, "--quiet", "--routers-per-node", "2", "--micro-batches", "1"])
        if r.returncode == 0:
            k = json.load(open(kl_self))["kl_divergence"]
            check(k["mean"] == 0.0 and k["max"] == 0.0 and k["top1_agreement"] == 1.0 and k["perplexity_ratio"] == 1.0,
                  f"KL of the model against itself (np 8, two routers): mean {k['mean']}, max {k['max']}, top-1 {k['top1_agreement']}")
        else:
            check(False, f"--kl-base np 8 ({r.stderr.strip()[-300:]})")
        bf16_dir = os.path.join(work, "mixtral-bf16")
        r = run([moerun, "convert", "--from-hf", hf_dir, "--out", bf16_dir, "--dtype", "bfloat16", "--quiet"])
        kl_bf16 = os.path.join(work, "kl-bf16.json")
        r2 = run([moerun, "perplexity", "--model", bf16_dir, "--tokens", tok_file, "--context", "32", "--kl-base", base,
                  "--json", kl_bf16, "--quiet"])
        if r.returncode == 0 and r2.returncode == 0:
            k = json.load(open(kl_bf16))["kl_divergence"]
            check(0 < k["mean"] < 0.01 and k["top1_agreement"] > 0.8,
                  f"KL of a bf16 copy against f32: mean {k['mean']:.3g}, p99 {k['p99']:.3g}, top-1 {k['top1_agreement']:.4f}")
            notes.append(f"tiny Mixtral (converted, 2 layers, d 64, vocab 128), 300 tokens, context 32: bf16 copy vs f32: "
                         f"KLD mean {k['mean']:.3g} median {k['median']:.3g} p99 {k['p99']:.3g} max {k['max']:.3g}, "
                         f"top-1 agreement {k['top1_agreement']:.4f}, perplexity ratio {k['perplexity_ratio']:.6f} over {k['tokens']} tokens")
        else:
            check(False, f"bf16 copy: convert / perplexity ({r.stderr.strip()[-200:]} {r2.stderr.strip()[-200:]})")

        def refused(args, code, *named):
            r = run(args)
            lines = [l for l in r.stderr.splitlines() if l.strip()]
            ok = r.returncode == code and len(lines) == 1 and all(n in lines[0] for n in named)
            check(ok, f"refused with exit {code} naming {named}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
        bad_reqs = os.path.join(work, "bad.jsonl")
        for field, value in (("logprobs", -1), ("prompt_logprobs", 129), ("logprobs", "3")):
            jsonl(bad_reqs, [{"id": "x", "prompt_tokens": [1, 2], field: value}])
            refused([moerun, "infer", "--model", moe_dir, "--input", bad_reqs, "--output", os.path.join(work, "bad-out.jsonl")], 3,
                    "line 1", "field " + field)
        other = os.path.join(work, "other-tokens.json")
        json.dump(ppl_tokens[::-1], open(other, "w"))
        refused([moerun, "perplexity", "--model", moe_dir, "--tokens", other, "--context", "32", "--kl-base", base], 3,
                base, "tokens differ")
        refused([moerun, "perplexity", "--model", moe_dir, "--tokens", tok_file, "--context", "16", "--kl-base", base], 3,
                base, "context")
        small = os.path.join(work, "small-vocab")
        r = run([moerun, "synth", "--out", small, "--vocab", "100", "--layers", "1", "--hidden", "32", "--intermediate", "32",
                 "--heads", "2", "--kv-heads", "1", "--head-dim", "16", "--experts", "2", "--quiet"])
        json.dump([t % 100 for t in ppl_tokens], open(os.path.join(work, "small-tokens.json"), "w"))
        refused([moerun, "perplexity", "--model", small, "--tokens", os.path.join(work, "small-tokens.json"), "--context", "32",
                 "--kl-base", base], 3, base, "vocab_size 128 is not this model's 100")
        bad_text = os.path.join(work, "bad.txt")
        open(bad_text, "wb").write(b"the cat \xff\xfe sat")
        refused([moerun, "perplexity", "--model", moe_dir, "--text", bad_text, "--context", "4"], 3, bad_text, "byte 8 is not UTF-8")
        refused([moerun, "perplexity", "--model", moe_dir, "--tokens", tok_file, "--context", "1000"], 2, "--context")
        refused([moerun, "perplexity", "--model", moe_dir, "--tokens", tok_file, "--context", "32", "--kl-base", tok_file], 3, tok_file)

    if figures:
        open(figures, "w").write("\n".join(notes) + "\n")
    for n in notes:
        print("figure: " + n)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""lm-evaluation-harness model type "moerun": lm-eval's requests as batch JSONL runs of `moerun infer`.

    python launch/lm_eval/lm_eval_moerun.py --model moerun \\
        --model_args model=DIR,launcher="mpirun -np 4" --tasks TASK [any lm_eval option]

or, from Python, `import moerun_lm` (this file on sys.path) and then lm_eval.simple_evaluate(model="moerun", ...).

Each lm-eval call becomes one moerun run over all of its requests (a JSONL file in, a JSONL file out):
  - loglikelihood: one prefill-only request per (context, continuation) with "prompt_logprobs": 1; the
    continuation's log-probs summed, greedy when every continuation token is the top-1 token;
  - loglikelihood_rolling: lm-eval's own rolling windows (utils.get_rolling_token_windows, as its hf
    model does), each scored the same way;
  - generate_until: greedy (or sampled with the task's temperature) generation of max_gen_toks tokens,
    the text cut at the first stop string.
Log-likelihoods are not yet batch-invariant: how many requests share moerun's steps (batching,
micro-batches, routers, a resumed run) moves them in the last bits (~1e-6 relative), not the tokens.
Text is tokenized with the model directory's tokenizer.json (the `tokenizers` package, as moerun and
transformers' fast tokenizers do), without special tokens, like lm-eval's hf model.

model_args:
  model=DIR             moerun model directory (from `moerun convert`, with tokenizer.json)
  moerun=PATH           the moerun binary (default: $MOERUN_BIN, else `moerun` on PATH)
  launcher="mpirun -np 4 ..."   how to start it (default: one process)
  max_length=N          longest sequence (default: the model's max_position)
  extra_args="..."      more `moerun infer` options (e.g. --max-batch-tokens 2048)
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile

import lm_eval.models  # noqa: F401  (lm-eval's own types first: it loads them only into an empty registry)
from lm_eval import utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model


def _model_info(moerun, model):
    """max_position, bos and eos of a model, from `moerun inspect`."""
    r = subprocess.run([moerun, "inspect", "--model", model], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"moerun inspect --model {model} failed (exit {r.returncode}): {r.stderr.strip()}")
    max_pos = int(re.search(r"max_position (\d+)", r.stdout).group(1))
    bos = int(re.search(r"bos (-?\d+)", r.stdout).group(1))
    eos = int(re.search(r"eos (-?\d+)", r.stdout).group(1))
    return max_pos, bos, eos


@register_model("moerun")
class MoerunLM(TemplateLM):
    def __init__(self, model, moerun=None, launcher="", max_length=None, extra_args="", batch_size=None, **kwargs):
        super().__init__()
        from tokenizers import Tokenizer
        self.model_dir = model
        self.moerun = moerun or os.environ.get("MOERUN_BIN") or shutil.which("moerun") or "moerun"
        self.launcher = shlex.split(launcher) if launcher else []
        self.extra_args = shlex.split(extra_args) if extra_args else []
        path = os.path.join(model, "tokenizer.json")
        if not os.path.exists(path):
            raise ValueError(f"{model} has no tokenizer.json (moerun convert copies it from the Hugging Face directory)")
        self.tokenizer = Tokenizer.from_file(path)
        max_pos, self.bos, self.eos = _model_info(self.moerun, model)
        self._max_length = int(max_length) if max_length else max_pos - 1  # a prompt must be shorter than max_position
        self.runs = 0  # moerun runs made (for tests)

    @property
    def eot_token_id(self):
        return self.eos

    @property
    def prefix_token_id(self):
        return self.bos if self.bos >= 0 else self.eos

    @property
    def max_length(self):
        return self._max_length

    def tok_encode(self, string, add_special_tokens=False, **kwargs):
        return self.tokenizer.encode(string, add_special_tokens=bool(add_special_tokens)).ids

    def tok_decode(self, tokens):
        return self.tokenizer.decode(tokens)

    def _run(self, requests):
        """One `moerun infer` over the request dicts; the result dicts in the same order."""
        if not requests:
            return []
        with tempfile.TemporaryDirectory(prefix="moerun-lm-eval-") as d:
            inp, out = os.path.join(d, "requests.jsonl"), os.path.join(d, "results.jsonl")
            with open(inp, "w") as f:
                for i, r in enumerate(requests):
                    f.write(json.dumps(dict(r, id=str(i))) + "\n")
            cmd = self.launcher + [self.moerun, "infer", "--model", self.model_dir, "--input", inp, "--output", out,
                                   "--quiet"] + self.extra_args
            r = subprocess.run(cmd, capture_output=True, text=True)
            self.runs += 1
            if r.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
            results = {}
            for line in open(out):
                rec = json.loads(line)
                if "error" in rec:
                    raise RuntimeError(f"moerun: request {rec['id']}: {rec['error']}")
                results[rec["id"]] = rec
            return [results[str(i)] for i in range(len(requests))]

    def _loglikelihood_tokens(self, requests, disable_tqdm=False, **kwargs):
        batch, spans = [], []
        for _, context_enc, continuation_enc in requests:
            # As lm-eval's hf model: the last max_length + 1 tokens, the continuation scored at the end.
            whole = (context_enc + continuation_enc)[-(self.max_length + 1):]
            n = min(len(continuation_enc), len(whole) - 1)
            batch.append({"prompt_tokens": whole, "max_new_tokens": 0, "prompt_logprobs": 1})
            spans.append(n)
        out = []
        for (key, _, _), res, n in zip(requests, self._run(batch), spans):
            entries = res["prompt_logprobs"][len(res["prompt_logprobs"]) - n:]
            logprob = float(sum(e["logprob"] for e in entries))
            greedy = all(e["top"] and e["top"][0][0] == e["token"] for e in entries)
            out.append((logprob, greedy))
            if key is not None:
                self.cache_hook.add_partial("loglikelihood", key, (logprob, greedy))
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        windows, owner = [], []
        for i, (string,) in enumerate(req.args for req in requests):
            for w in map(utils.make_disjoint_window,
                         utils.get_rolling_token_windows(token_list=self.tok_encode(string), prefix_token=self.prefix_token_id,
                                                         max_seq_len=self.max_length, context_len=1)):
                windows.append((None,) + w)
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logprob, _) in zip(owner, self._loglikelihood_tokens(windows)):
            totals[i] += logprob
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", (req.args[0],), total)
        return totals

    def generate_until(self, requests, disable_tqdm=False):
        batch, stops = [], []
        for req in requests:
            context, gen = req.args
            gen = dict(gen or {})
            until = gen.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            eos_text = self.tok_decode([self.eos])
            if eos_text and eos_text not in until:
                until.append(eos_text)
            max_gen = int(gen.get("max_gen_toks", 256))
            keep = max(1, self.max_length - max_gen)
            prompt = self.tok_encode(context)[-keep:] or [self.prefix_token_id]
            r = {"prompt_tokens": prompt, "max_new_tokens": max_gen}
            if gen.get("do_sample") and float(gen.get("temperature", 0.0)) > 0:
                r["temperature"] = float(gen["temperature"])
            batch.append(r)
            stops.append(until)
        out = []
        for req, res, until in zip(requests, self._run(batch), stops):
            text = self.tok_decode(res["output_tokens"])
            for s in until:
                if s and s in text:
                    text = text.split(s)[0]
            out.append(text)
            self.cache_hook.add_partial("generate_until", req.args, text)
        return out

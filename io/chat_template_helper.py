# The chat-template renderer of io/chat_template.cpp: the model's chat templates (jinja2's sandbox, as
# transformers' apply_chat_template renders them), one conversation a line over stdin/stdout. Kept
# apart from the tokenizer helper so that a template cannot take more than its bounds: this process
# runs under an address-space limit (argv[2] bytes) and is the OOM killer's first choice, each render
# has a time limit and an output limit, and io/chat_template.cpp kills and restarts it when it overruns.
# Embedded into the moerun binary and run as `python3 -I -c <this> TOKENIZER_JSON MEMORY_BYTES`.
#   -> {"ready": true}  once, at start ({"error", "missing": "jinja2"} when jinja2 is not there)
#   <- {"messages": [...], "kwargs": {...}, "template": NAME or TEXT or absent, "max_bytes": N, "seconds": S}
#   -> {"text": "..."} or {"error": "..."}
# Templates compile when a line first names them: one that does not compile is the error of the
# lines that use it, never of the job.
import json
import os
import resource
import signal
import sys

try:
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), int(sys.argv[2])))
except (ValueError, OSError):
    pass  # a limit the kernel refuses: the caller's deadline still bounds the render
try:
    with open("/proc/self/oom_score_adj", "w") as f:  # under a cgroup limit, this process goes first
        f.write("1000")
except OSError:
    pass
try:
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError as e:  # the caller words it: which Python, what to install
    sys.stdout.write(json.dumps({"error": f"{type(e).__name__}: {e}", "missing": "jinja2"}) + "\n")
    sys.stdout.flush()
    sys.exit(1)


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


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
ENV.globals["strftime_now"] = strftime_now
DIR = os.path.dirname(os.path.abspath(sys.argv[1]))


def model_templates():
    """The directory's chat templates as text by name (tokenizer_config.json's chat_template, a string
    or a list of {name, template}; or chat_template.jinja), where each came from, and the special
    tokens transformers passes to them."""
    cfg = {}
    path = os.path.join(DIR, "tokenizer_config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    raw, source = cfg.get("chat_template"), f"{path}'s chat_template"
    jinja = os.path.join(DIR, "chat_template.jinja")
    if os.path.exists(jinja):
        with open(jinja, encoding="utf-8") as f:
            raw, source = f.read(), jinja
    if isinstance(raw, list):
        templates = {t["name"]: (t["template"], f"{source} named {t['name']!r}") for t in raw
                     if isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("template"), str)}
    elif isinstance(raw, str):
        templates = {"default": (raw, source)}
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
    return templates, variables


MODEL = None     # (templates by name, variables): read at the first line
COMPILED = {}    # template text -> compiled template or the compile error's message


def pick_template(name):
    """transformers' choice: the named one of the model's templates, the default when none is named,
    else the text given is itself a template. Returns (text, where it came from)."""
    templates = MODEL[0]
    if name is None:
        if not templates:
            raise Refusal("the model has no chat template (tokenizer_config.json's chat_template, or chat_template.jinja)")
        if "default" not in templates:
            raise Refusal(f"the model has several chat templates and no default: name one of {sorted(templates)} in body.chat_template")
        return templates["default"]
    if name in templates:
        return templates[name]
    if "{{" not in name and "{%" not in name:  # a misspelt name, not a template
        raise Refusal(f"no chat template named {name!r}; the model has {sorted(templates)}")
    return name, "body.chat_template"


def compiled(text, source):
    if text not in COMPILED:
        try:
            COMPILED[text] = ENV.from_string(text)
        except jinja2.exceptions.TemplateSyntaxError as e:
            COMPILED[text] = f"{source} does not compile: {e.message} (line {e.lineno})"
        except Exception as e:
            COMPILED[text] = f"{source} does not compile: {type(e).__name__}: {e}"
    if isinstance(COMPILED[text], str):
        raise Refusal(COMPILED[text])
    return COMPILED[text]


class Overrun(Exception):  # a bound reached
    pass


class Refusal(Exception):  # a template that is not there or does not compile: its message says it all
    pass


def on_alarm(signum, frame):
    raise Overrun("took longer than the render's time limit")


def render(req):
    global MODEL
    if MODEL is None:
        MODEL = model_templates()
    template = compiled(*pick_template(req.get("template")))
    limit, parts, size = int(req["max_bytes"]), [], 0
    # Streamed, so that the output stops at the bound instead of growing to it in one string.
    for part in template.generate(messages=req["messages"], tools=None, documents=None, add_generation_prompt=True,
                                  **{**MODEL[1], **req.get("kwargs", {})}):
        size += len(part.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise Overrun(f"rendered more than {limit} bytes, more than the model's max_position tokens can hold")
        parts.append(part)
    text = "".join(parts)
    text.encode("utf-8")  # UnicodeEncodeError (a lone surrogate from a \\ud800 escape): the line's error
    return text


signal.signal(signal.SIGALRM, on_alarm)
sys.stdout.write(json.dumps({"ready": True}) + "\n")
sys.stdout.flush()
for line in sys.stdin:
    try:
        req = json.loads(line)
        signal.setitimer(signal.ITIMER_REAL, float(req["seconds"]))
        try:
            out = {"text": render(req)}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except Overrun as e:
        out = {"error": str(e), "bound": True}
    except MemoryError:
        out = {"error": "needed more memory than the render's limit", "bound": True}
    except Refusal as e:
        out = {"error": str(e)}
    except Exception as e:
        out = {"error": f"{type(e).__name__}: {e}"}
    try:
        text = json.dumps(out)
    except Exception as e:  # a text json cannot write (lone surrogates)
        text = json.dumps({"error": f"rendered text that is not UTF-8 ({type(e).__name__})"})
    sys.stdout.write(text + "\n")
    sys.stdout.flush()

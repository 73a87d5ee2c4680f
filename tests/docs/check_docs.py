#!/usr/bin/env python3
"""Docs and help texts that say what is true (issue 81):
- every relative link in README.md and docs/ resolves to a file or folder of the tree;
- every path of the tree a source comment names (base/..., io/..., runtime/..., ...) exists;
- `moerun --help` lists every family of the family table and every benchmark of `moerun bench`,
  and README's family table has one row per family, no more;
- every script under launch/ and cluster/ answers --help with its usage and exit 0, in a scratch
  directory it leaves empty (nothing else runs).
The family table is the one the binary registers (model/model_family.cpp), read from `moerun synth
--help`'s --family list, which prints it; the benchmarks from `moerun bench --help`.

usage: check_docs.py MOERUN_BIN SOURCE_DIR
"""
import os
import re
import subprocess
import sys
import tempfile

failures = 0
FOLDERS = ("base", "model", "io", "convert", "comm", "router", "experts", "runtime", "launch", "cluster", "tests", "docs", "cmake")


def check(ok, what):
    global failures
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {what}", flush=True)


def tracked(src):
    out = subprocess.run(["git", "-C", src, "ls-files", "--cached", "--others", "--exclude-standard"], capture_output=True, text=True)
    return [f for f in out.stdout.splitlines() if os.path.exists(os.path.join(src, f))]


def links(src, files):
    bad = []
    for f in files:
        if not f.endswith(".md") or not (f == "README.md" or f.startswith("docs/")):
            continue
        text = open(os.path.join(src, f), encoding="utf-8").read()
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(os.path.join(src, f)), target.split("#")[0]))
            if not os.path.exists(path):
                bad.append(f"{f}: {target}")
    check(not bad, f"every relative link in README.md and docs/ resolves ({len(bad)} dead: {bad[:8]})")


COMMENT = {".cpp": r"//(.*)", ".hpp": r"//(.*)", ".cu": r"//(.*)", ".cuh": r"//(.*)", ".py": r"#(.*)", ".sh": r"#(.*)", ".txt": r"#(.*)", ".cmake": r"#(.*)"}
PATH = re.compile(r"(?<![\w/.{}$-])((?:%s)/[A-Za-z0-9_./-]*[A-Za-z0-9_])" % "|".join(FOLDERS))


def named_path_exists(src, p):
    full = os.path.join(src, p)
    if os.path.exists(full) or any(os.path.exists(full + ext) for ext in (".hpp", ".cpp", ".py", ".sh", ".md")):
        return True
    return bool([g for g in (full + ".*",) if __import__("glob").glob(g)])


def comment_paths(src, files):
    bad = []
    for f in files:
        ext = os.path.splitext(f)[1] if not f.endswith("CMakeLists.txt") else ".txt"
        if ext not in COMMENT or f.startswith(("docs/", "tests/data/")):
            continue
        for n, line in enumerate(open(os.path.join(src, f), encoding="utf-8", errors="replace"), 1):
            m = re.search(COMMENT[ext], line)
            if not m:
                continue
            for p in PATH.findall(m.group(1)):
                p = p.rstrip(".")
                # globs, placeholders (DATE-COMMIT), and what the scripts make at run time
                if "*" in p or "DATE-COMMIT" in p or p.startswith(("tests/openai_batch", "docs/data/20", "cluster/local/run/")):
                    continue
                if not named_path_exists(src, p):
                    bad.append(f"{f}:{n}: {p}")
    check(not bad, f"every path of the tree a source comment names exists ({len(bad)} missing: {bad[:12]})")


def help_lists(moerun, src):
    top = subprocess.run([moerun, "--help"], capture_output=True, text=True).stdout
    synth = subprocess.run([moerun, "synth", "--help"], capture_output=True, text=True).stdout
    m = re.search(r"--family arg.*?: (.*?)\(docs/FORMATS\.md\)", " ".join(synth.split()))
    table = [w.strip() for w in m.group(1).split(",")] if m else []
    check(len(table) >= 13, f"the family table, as synth --help prints it: {len(table)} families ({', '.join(table)})")
    missing = [f for f in table if not re.search(r"\b%s\b" % re.escape(f), top)]
    check(table and not missing, f"moerun --help lists every family (missing: {missing or 'none'})")
    bench = subprocess.run([moerun, "bench", "--help"], capture_output=True, text=True).stdout
    kinds = re.findall(r"^  (\w+) ", bench, flags=re.M)
    missing = [k for k in kinds if not re.search(r"\b%s\b" % k, top.split("bench", 1)[-1])]
    check(len(kinds) >= 6 and not missing, f"moerun --help lists every benchmark of moerun bench ({', '.join(kinds)}; missing {missing})")
    readme = open(os.path.join(src, "README.md"), encoding="utf-8").read()
    section = readme.split("<!-- families -->", 1)[-1].split("<!-- /families -->", 1)[0] if "<!-- families -->" in readme else ""
    rows = re.findall(r"^\| `?([a-z0-9_]+)`? \|", section, flags=re.M)
    check(rows == table, f"README's family table has one row per family, in the table's order ({rows} against {table})")


def script_help(src, files):
    scripts = [f for f in files if f.startswith(("launch/", "cluster/")) and f.endswith((".sh", ".py")) and os.access(os.path.join(src, f), os.X_OK)]
    bad = []
    for f in scripts:
        with tempfile.TemporaryDirectory() as d:
            try:
                r = subprocess.run([os.path.join(src, f), "--help"], capture_output=True, text=True, cwd=d, timeout=30,
                                   stdin=subprocess.DEVNULL)
                ok = r.returncode == 0 and "usage" in (r.stdout + r.stderr).lower() and not os.listdir(d)
                if not ok:
                    bad.append(f"{f} (exit {r.returncode}{', wrote files' if os.listdir(d) else ''})")
            except subprocess.TimeoutExpired:
                bad.append(f"{f} (ran past 30 s)")
    check(scripts and not bad, f"every one of {len(scripts)} scripts under launch/ and cluster/ answers --help with its usage and exit 0 ({bad})")


def main():
    moerun, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    files = tracked(src)
    links(src, files)
    comment_paths(src, files)
    help_lists(moerun, src)
    script_help(src, files)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

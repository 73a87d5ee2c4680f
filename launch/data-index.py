#!/usr/bin/env python3
"""Writes docs/data/README.md: every measurement file in docs/data (named DATE-COMMIT-WHAT) with its
date, commit, first line and the docs that cite it. Run after adding data files:
    launch/data-index.py

usage: launch/data-index.py
"""
import sys

if sys.argv[1:2] in (["-h"], ["--help"]):  # the docstring is the usage; nothing runs
    print(__doc__)
    sys.exit(0)
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADER = '''# Measurement data

Every file here is named `DATE-COMMIT-WHAT`: the day it was measured and the commit measured (for
files whose name carried no commit, the last commit that changed the file), then what it is. New
files follow the same rule (`$(date +%F)-$(git rev-parse --short=7 HEAD)-what.txt`, as
`launch/reference-2025.sh` writes); `launch/data-index.py` rewrites this index. The current figures
are in [../PERFORMANCE.md](../PERFORMANCE.md); the measurements in order, with how each was made, in
[../log/performance-2026.md](../log/performance-2026.md).

| date | commit | file | what it is (its first line) | cited by |
| --- | --- | --- | --- | --- |
'''


def first_line(path, name):
    if os.path.isdir(path):
        return "folder: " + ", ".join(sorted(os.listdir(path)))[:90]
    if name.endswith(".json"):
        return "the JSON of the .txt of the same name" if os.path.exists(path[:-5] + ".txt") else "JSON"
    lines = [l.strip() for l in open(path, encoding="utf-8", errors="replace") if l.strip() and not l.startswith("#!")]
    if name.endswith((".py", ".cpp", ".sh")):
        return "script: " + (lines[0].lstrip('#/"\' ') if lines else "")[:100]
    pick = next((l for l in lines if l.startswith("#") or "moerun" in l or "bench" in l), lines[0] if lines else "")
    return pick.lstrip("# ")[:110]


def main():
    data = os.path.join(ROOT, "docs", "data")
    docs = [f for f in subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True).stdout.split()
            if not f.startswith("docs/data/")]
    texts = {f: open(os.path.join(ROOT, f), encoding="utf-8").read() for f in docs if os.path.exists(os.path.join(ROOT, f))}
    rows = []
    for name in sorted(n for n in os.listdir(data) if n != "README.md"):
        what = first_line(os.path.join(data, name), name).replace("|", "/")
        cited = sorted({os.path.basename(f) for f, t in texts.items() if "data/" + name in t})
        rows.append(f"| {name[:10]} | `{name[11:18]}` | [{name[19:]}]({name}) | {what} | {', '.join(cited) or '-'} |")
    tmp = os.path.join(data, "README.md.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(HEADER + "\n".join(rows) + "\n")
    os.replace(tmp, os.path.join(data, "README.md"))
    print(f"{len(rows)} files indexed")


if __name__ == "__main__":
    main()

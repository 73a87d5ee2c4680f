#!/usr/bin/env python3
"""Fails on an #include that docs/LAYERS.md does not allow.

check_layering.py ROOT        check the tree at ROOT against ROOT/docs/LAYERS.md
check_layering.py --self-test plant a forbidden include in a scratch tree and check that it is caught
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)/([^"]+)"', re.M)
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh", ".in")


def read_table(root):
    """(rules, private): rules[folder] = the folders it may include; private[subfolder] = the folders
    whose files may include it (rows of the second table, whose first cell names a subfolder)."""
    path = os.path.join(root, "docs", "LAYERS.md")
    rules, private = {}, {}
    for line in open(path, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("folder", "subfolder", "") or set(cells[0]) <= set("- "):
            continue
        (private if "/" in cells[0] else rules)[cells[0]] = set(cells[1].split())
    if not rules:
        sys.exit(f"{path}: no table of folders")
    return rules, private


def violations(root, rules, private):
    found = []
    for folder, allowed in sorted(rules.items()):
        top = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if d not in ("build", "venv", "__pycache__")]
            for name in sorted(filenames):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                text = open(path, encoding="utf-8", errors="replace").read()
                for m in INCLUDE.finditer(text):
                    target = m.group(1)
                    full = f"{target}/{m.group(2)}"
                    for sub, users in private.items():
                        if full.startswith(sub + "/") and folder not in users:
                            line = text.count("\n", 0, m.start()) + 1
                            found.append(f"{os.path.relpath(path, root)}:{line}: includes {full}, but only "
                                         f"{', '.join(sorted(users))} may include {sub}/ (docs/LAYERS.md)")
                    if target in rules and target not in allowed:
                        line = text.count("\n", 0, m.start()) + 1
                        rel = os.path.relpath(path, root)
                        found.append(f"{rel}:{line}: includes {target}/{m.group(2)}, but {folder}/ may include only "
                                     f"{', '.join(sorted(allowed))} (docs/LAYERS.md)")
    return found


def self_test():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "docs"))
        shutil.copy(os.path.join(root, "docs", "LAYERS.md"), os.path.join(tmp, "docs"))
        for folder in ("router", "runtime"):
            os.makedirs(os.path.join(tmp, folder))
        with open(os.path.join(tmp, "runtime", "fine.cpp"), "w") as f:
            f.write('#include "router/gate.hpp"\n#include <vector>\n')
        ok = subprocess.run([sys.executable, __file__, tmp], capture_output=True, text=True)
        assert ok.returncode == 0, f"an allowed include was refused: {ok.stdout}{ok.stderr}"
        with open(os.path.join(tmp, "router", "bad.cpp"), "w") as f:
            f.write('// a router file reaching up into the engine\n#include "runtime/engine.hpp"\n')
        bad = subprocess.run([sys.executable, __file__, tmp], capture_output=True, text=True)
        assert bad.returncode == 1, f"a forbidden include passed (exit {bad.returncode})"
        assert "router/bad.cpp:2: includes runtime/engine.hpp" in bad.stdout, bad.stdout
        os.remove(os.path.join(tmp, "router", "bad.cpp"))
        with open(os.path.join(tmp, "runtime", "private.cpp"), "w") as f:
            f.write('#include "experts/cpu/cpu_backend.hpp"\n')
        sub = subprocess.run([sys.executable, __file__, tmp], capture_output=True, text=True)
        assert sub.returncode == 1 and "runtime/private.cpp:1: includes experts/cpu/cpu_backend.hpp" in sub.stdout, sub.stdout
        print("self-test: an allowed include passes; router/ including runtime/ fails with:\n  " + bad.stdout.strip() +
              "\nand runtime/ including the private experts/cpu/ with:\n  " + sub.stdout.strip())


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    rules, private = read_table(root)
    found = violations(root, rules, private)
    for v in found:
        print(v)
    if not found:
        print(f"layering: every include of {', '.join(sorted(rules))} follows docs/LAYERS.md")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Every file moerun writes goes through the one rule of io/output_file.hpp (issue 63): this test
enumerates the calls that can create or write a file in the tree's C++ sources and fails on any that
is not the rule itself or a listed use of what the rule hands out.

check_file_writers.py ROOT        scan ROOT's sources
check_file_writers.py --self-test plant a writer in a scratch copy and check that it is caught
"""
import os
import re
import shutil
import sys
import tempfile

# Calls that create, open for writing, replace or copy a file.
WRITERS = [
    ("open(2) for writing", re.compile(r"\bopen(at)?\s*\([^;]*\bO_(CREAT|WRONLY|RDWR|TRUNC|APPEND)\b")),
    ("creat(2)", re.compile(r"\bcreat\s*\(")),
    ("rename(2)", re.compile(r"\brename(at)?\s*\(")),
    ("mkstemp", re.compile(r"\bmk(o)?stemps?\s*\(")),
    ("stdio for writing", re.compile(r"\bfopen\s*\([^,;]*,\s*\"[^\"]*[wa+][^\"]*\"")),
    ("C++ output stream", re.compile(r"\b(std::)?(o|)fstream\b(?!\s*>)")),
    ("filesystem copy", re.compile(r"\b(copy_file|copy_symlink|fs::copy|filesystem::copy)\s*\(")),
    ("HDF5 file creation", re.compile(r"\bH5Fcreate\s*\(|H5Mode::Create|H5F_ACC_RDWR")),
    ("link creation", re.compile(r"\b(symlink|link|create_symlink|create_hard_link)\s*\(")),
]

# (file, writer kind): why that use keeps the rule. Anything else found is a failure.
ALLOWED = {
    ("io/output_file.cpp", "open(2) for writing"): "the rule: AtomicFile's O_EXCL | O_NOFOLLOW temp file and open_owned_file",
    ("io/output_file.cpp", "rename(2)"): "the rule: the temp file renamed onto the name (a link there is replaced)",
    ("io/output_file.cpp", "mkstemp"): "a comment saying why mkstemp is not used",
    ("io/output_lock.cpp", "open(2) for writing"): "through open_owned_file",
    ("io/result_journal.cpp", "open(2) for writing"): "through open_owned_file",
    ("io/blob_store.cpp", "open(2) for writing"): "through open_owned_file",
    ("io/child_process.cpp", "open(2) for writing"): "a child's stdout to /dev/null (a spawn file action, no file made)",
    ("io/hdf5.cpp", "HDF5 file creation"): "h5_open_file(Create): callers pass an AtomicFile's temp path",
    ("io/hdf5_object_store.cpp", "HDF5 file creation"): "the read-only S3 driver refuses write flags",
    ("io/model_file.cpp", "HDF5 file creation"): "ModelFileWriter: constructed on AtomicFile::temp_path() only",
    ("io/expert_shards.cpp", "HDF5 file creation"): "ExpertShardWriter: constructed on AtomicFile::temp_path() only",
    ("io/logprob_file.cpp", "HDF5 file creation"): "on its AtomicFile's temp path",
    ("io/routing_trace.cpp", "HDF5 file creation"): "inside replace_file_atomically",
    ("io/affinity_file.cpp", "HDF5 file creation"): "inside replace_file_atomically",
}

SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".c", ".h")
SKIP_DIRS = {"tests", "build", "build-asan", "docs", "peer", ".git", "venv", "__pycache__", "cluster"}
# Writers whose files are constructed by the caller: the paths they may be given.
TEMP_ONLY = re.compile(r"\b(ModelFileWriter|ExpertShardWriter)\s+\w+\s*\(([^,]*)")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def scan(root):
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
        for name in sorted(filenames):
            if not name.endswith(SOURCES):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name))
            raw = open(os.path.join(dirpath, name), encoding="utf-8", errors="replace").read()
            code = strip_comments(raw)
            # String literals hold messages ("... through a link (...)"), except fopen's mode.
            bare = re.sub(r'"(\\.|[^"\\\n])*"', '""', code)
            for kind, pattern in WRITERS:
                text = code if kind == "stdio for writing" else bare
                for m in pattern.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    if (rel, kind) not in ALLOWED and not (kind == "mkstemp" and rel == "io/output_file.cpp"):
                        found.append(f"{rel}:{line}: {kind} outside the one rule for files (io/output_file.hpp)")
            for m in TEMP_ONLY.finditer(code):
                if "temp_path()" not in m.group(2):
                    line = code.count("\n", 0, m.start()) + 1
                    found.append(f"{rel}:{line}: {m.group(1)} on a path that is not an AtomicFile's temp_path()")
    return found


def self_test():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    scratch = tempfile.mkdtemp(prefix="writers-")
    try:
        for folder in ("io", "runtime"):
            shutil.copytree(os.path.join(root, folder), os.path.join(scratch, folder))
        if scan(scratch):
            sys.exit("self-test: the unchanged tree already fails: " + "; ".join(scan(scratch)))
        cases = {
            "open": 'int f(){ return ::open("x", O_WRONLY | O_CREAT, 0644); }\n',
            "ofstream": 'void f(){ std::ofstream out("x"); }\n',
            "fopen": 'void f(){ std::fopen("x", "w"); }\n',
            "rename": 'void f(){ ::rename("a", "b"); }\n',
            "writer": 'void f(const std::string& p){ io::ModelFileWriter w(p, c, p); }\n',
        }
        for what, code in cases.items():
            planted = os.path.join(scratch, "runtime", "planted_writer.cpp")
            with open(planted, "w") as f:
                f.write(code)
            if not any("planted_writer.cpp" in v for v in scan(scratch)):
                sys.exit(f"self-test: a planted {what} was not caught")
            os.remove(planted)
        print(f"self-test: {len(cases)} planted writers caught")
    finally:
        shutil.rmtree(scratch)


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    found = scan(sys.argv[1])
    for v in found:
        print(v)
    if found:
        sys.exit(f"{len(found)} writer(s) outside the one rule for files")
    print("every file writer goes through io/output_file.hpp")


if __name__ == "__main__":
    main()

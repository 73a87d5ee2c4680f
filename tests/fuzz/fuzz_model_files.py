#!/usr/bin/env python3
"""Bounded, seeded fuzz test of the model loader: mutates the bytes of a small synthetic model's
HDF5 files (model.h5 and the expert shards) and runs `moerun infer` on each mutant. Every run must
end with exit 0 (the mutation hit nothing that matters: all results written), or with exit 3/4 and
exactly one `moerun: error:` line naming a file of the model, no output file and no signal.
A crash inside libhdf5 on corrupt metadata is the HDF5 probe's to catch (io/hdf5_probe.hpp).

usage: fuzz_model_files.py MOERUN --seconds S --seed N [--keep DIR] [--max-runs N]
Failing mutants are copied to --keep (default: kept nowhere) for reproduction.
"""
import argparse, os, random, shutil, subprocess, sys, tempfile, time

def mutate(data: bytearray, rng: random.Random) -> str:
    """Applies 1-6 edits; returns a description for the report."""
    what = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.random()
        # HDF5 keeps its metadata (superblock, object headers, B-trees, heaps) mostly in the first
        # few KiB of these small files: bias the offsets there.
        span = len(data) if rng.random() < 0.3 else min(len(data), 6144)
        off = rng.randrange(span)
        if kind < 0.55:
            n = rng.choice([1, 1, 1, 2, 4, 8])
            for i in range(off, min(off + n, len(data))):
                data[i] = rng.randrange(256)
            what.append(f"bytes@{off}+{n}")
        elif kind < 0.7:
            bit = rng.randrange(8)
            data[off] ^= 1 << bit
            what.append(f"bit{bit}@{off}")
        elif kind < 0.8:
            v = rng.choice([0xFF, 0x7F, 0x80, 0x00])
            n = rng.choice([4, 8])
            for i in range(off, min(off + n, len(data))):
                data[i] = v
            what.append(f"fill{v:#x}@{off}+{n}")
        elif kind < 0.9:
            n = rng.randint(1, 64)
            src = rng.randrange(len(data))
            chunk = data[src:src + n]
            data[off:off + len(chunk)] = chunk
            what.append(f"copy{src}->{off}+{n}")
        else:
            cut = rng.randrange(max(1, len(data) // 2), len(data))
            del data[cut:]
            what.append(f"truncate@{cut}")
    return ",".join(what)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("moerun")
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-runs", type=int, default=100000)
    ap.add_argument("--keep", default="")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="moerun-fuzz-model.")
    # A metadata loop in libhdf5 (seen: a corrupt global heap) is a probe timeout: keep it short here.
    env = dict(os.environ, MOERUN_LOG="warn", MOERUN_HDF5_PROBE_TIMEOUT="5")
    try:
        base = os.path.join(work, "base")
        subprocess.run([a.moerun, "synth", "--out", base, "--layers", "2", "--experts", "4", "--top-k", "2", "--hidden", "32",
                        "--heads", "2", "--kv-heads", "1", "--head-dim", "16", "--intermediate", "48", "--vocab", "64",
                        "--max-position", "64", "--shards", "2", "--seed", "3", "--quiet"], check=True, env=env)
        reqs = os.path.join(work, "reqs.jsonl")
        with open(reqs, "w") as f:
            for i in range(3):
                f.write('{"id": "r%d", "prompt_tokens": [1, %d, %d], "max_new_tokens": 3}\n' % (i, i + 2, 2 * i + 5))
        files = sorted(n for n in os.listdir(base) if n.endswith(".h5"))
        counts = {"ok": 0, "exit3": 0, "exit4": 0}
        failures = 0
        start = time.monotonic()
        runs = 0
        while time.monotonic() - start < a.seconds and runs < a.max_runs:
            runs += 1
            mdir = os.path.join(work, "m")
            shutil.rmtree(mdir, ignore_errors=True)
            shutil.copytree(base, mdir)
            target = rng.choice(files)
            path = os.path.join(mdir, target)
            data = bytearray(open(path, "rb").read())
            desc = mutate(data, rng)
            with open(path, "wb") as f:
                f.write(data)
            out = os.path.join(work, "out.jsonl")
            for p in (out,):
                if os.path.exists(p):
                    os.remove(p)
            try:
                r = subprocess.run([a.moerun, "infer", "--model", mdir, "--input", reqs, "--output", out, "--quiet"],
                                   capture_output=True, timeout=120, env=env)
                rc, err = r.returncode, r.stderr.decode("utf-8", errors="replace")
            except subprocess.TimeoutExpired:
                rc, err = "timeout", ""
            lines = [l for l in err.splitlines() if l.strip()]
            problem = None
            if rc == 0:
                if not os.path.exists(out) or sum(1 for _ in open(out)) != 3:
                    problem = "exit 0 without 3 results"
                else:
                    counts["ok"] += 1
            elif rc in (3, 4):
                counts[f"exit{rc}"] += 1
                if os.path.exists(out):
                    problem = "an output file after a failure"
                elif len(lines) != 1 or not lines[0].startswith("moerun: error: "):
                    problem = f"{len(lines)} stderr lines"
                elif mdir not in lines[0]:
                    problem = "the error does not name a model file"
                elif "\ufffd" in lines[0] or not lines[0].isprintable():
                    problem = "the error line has unprintable bytes (names from the file must be escaped)"
            else:
                problem = f"exit {rc}" + (" (signal)" if isinstance(rc, int) and rc < 0 else "")
            if problem:
                failures += 1
                print(f"FAIL run {runs}: {target} {desc}: {problem}\n  stderr: {err.strip()[:2000]}", flush=True)
                if a.keep:
                    dest = os.path.join(a.keep, f"case-{a.seed}-{runs}")
                    shutil.copytree(mdir, dest, dirs_exist_ok=True)
        print(f"fuzz_model_files: seed {a.seed}, {runs} runs in {time.monotonic() - start:.0f} s: "
              f"{counts['ok']} ran, {counts['exit3']} exit 3, {counts['exit4']} exit 4, {failures} failures")
        return 1 if failures else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    sys.exit(main())

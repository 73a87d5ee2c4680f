#!/usr/bin/env python3
"""The parts of launch/bench-offload.sh that CI can run (the benchmark itself builds two peers and
takes an hour): the llama-batched-bench table parser, and, where this machine lets the test make a cgroup v1
memory group, run_limited's limit, OOM detection, timeout, read-byte count and clean-up on real
processes. Prints ok/FAIL lines; exit 1 on any failure."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch", "peer"))
import bench_offload as b  # noqa: E402

fails = 0


def check(what, cond):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += 0 if cond else 1


LLAMA = """
|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |
|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|
|   128 |     32 |    1 |    160 |    0.321 |   398.75 |    0.412 |    77.67 |    0.733 |   218.28 |
"""
check("batched-bench row: prefill and decode tokens/s", b.batched_bench_row(LLAMA) == (398.75, 77.67))
check("batched-bench: no data row is None", b.batched_bench_row("|    PP |     TG |\n") is None)

probe = os.path.join(b.CGROOT, f"moerun-harness-{os.getpid()}")
try:
    os.mkdir(probe)
    os.rmdir(probe)
    can = True
except OSError:
    can = False
if not can:
    print(f"note: cannot make a cgroup under {b.CGROOT} here: the limit checks did not run")
else:
    env = dict(os.environ)
    # 64 MiB limit: 16 MiB fits, 256 MiB of touched memory is killed (exit 137, oom_kill counted).
    alloc = [sys.executable, "-c", "import sys; b = bytearray(int(sys.argv[1]) << 20); b[::4096] = b'x' * len(b[::4096])"]
    r = b.run_limited(alloc + ["16"], 64 << 20, f"moerun-harness-{os.getpid()}", env)
    check(f"16 MiB under a 64 MiB limit runs (exit {r['rc']}, peak {r['peak'] >> 20} MiB)", r["rc"] == 0 and not r["oom"])
    check("the peak is counted and within the limit", 16 << 20 <= r["peak"] <= 64 << 20)
    r = b.run_limited(alloc + ["256"], 64 << 20, f"moerun-harness-{os.getpid()}", env)
    check(f"256 MiB under a 64 MiB limit is OOM-killed and seen (exit {r['rc']}, oom_kill {r['oom']})", r["rc"] == -9 or r["rc"] == 137 or r["oom"] > 0)
    check("the cgroups are removed", not os.path.exists(os.path.join(b.CGROOT, f"moerun-harness-{os.getpid()}")))
    import time
    t0 = time.time()
    r = b.run_limited(["sleep", "30"], 64 << 20, f"moerun-harness-{os.getpid()}", env, timeout=0.5)
    check(f"a run past its timeout is stopped and said so ({time.time() - t0:.1f} s)", r["timed_out"] and time.time() - t0 < 10)
    data = os.path.join(os.getcwd(), f"harness-{os.getpid()}.bin")
    with open(data, "wb") as f:
        f.write(os.urandom(8 << 20))
    r = b.run_limited(["dd", f"if={data}", "of=/dev/null", "bs=1M"], 256 << 20, f"moerun-harness-{os.getpid()}", env)  # page cache dropped first: a real read
    os.remove(data)
    check(f"disk bytes read are counted ({r['read_bytes']} of {8 << 20})", r["read_bytes"] >= 8 << 20)
print(f"{fails} failed")
sys.exit(1 if fails else 0)

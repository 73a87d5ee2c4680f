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
check("batched-bench row: its ten numbers", b.batched_bench_cells(LLAMA) == [128, 32, 1, 160, 0.321, 398.75, 0.412, 77.67, 0.733, 218.28])
check("batched-bench: no data row is None", b.batched_bench_cells("|    PP |     TG |\n") is None)
check("peer_decode's line: prefill and decode tokens/s", b.peer_decode_speeds("load log\n128 0.5 32 0.25\n") == (256.0, 128.0))
check("peer_decode: no line is None", b.peer_decode_speeds("error: no model\n") is None)

# The physical bound, hand-derived: 4 layers x 128 experts, top-8 uniform (each expert 1/16 of a
# token), 128 slots, N = 1: a step reads 384 * 1/16 = 24 experts; 1 MB each at 1.2 GB/s: 50 tokens/s.
uniform = [[1 / 16] * 128 for _ in range(4)]
check("physical bound, uniform routing", abs(b.physical_bound(uniform, 1, 128, 1e6, 1.2e9) - 50.0) < 1e-9)
# N = 2: each expert is read when either token routes to it: 1 - (15/16)^2 = 31/256 of a step.
want = 2 * 1.2e9 / (384 * 31 / 256 * 1e6)
check("physical bound, two tokens a step", abs(b.physical_bound(uniform, 2, 128, 1e6, 1.2e9) - want) < 1e-6)
# Skewed: L1 keeps the likeliest; with a slot for every routed expert nothing need be read.
skewed = [[0.5, 0.5, 0.25, 0.0] for _ in range(2)]
check("physical bound, the likeliest experts kept", abs(b.physical_bound(skewed, 1, 4, 1e6, 1e9) - 1e9 / (0.5e6)) < 1e-6)
check("physical bound, nothing to read", b.physical_bound(skewed, 1, 6, 1e6, 1e9) == float("inf"))
# Held out: the other tokens favour experts 2 and 3, so L1's 4 slots keep those, and a step reads
# experts 0 and 1 of both layers: 4 x 0.5 = 2 experts, 2 MB at 1 GB/s.
other = [[0.0, 0.25, 0.5, 0.5] for _ in range(2)]
check("physical bound, L1 chosen from held-out routing", abs(b.physical_bound(skewed, 1, 4, 1e6, 1e9, other) - 500.0) < 1e-6)
check("physical bound, held-out routing that agrees: the oracle's", b.physical_bound(skewed, 1, 4, 1e6, 1e9, skewed) == b.physical_bound(skewed, 1, 4, 1e6, 1e9))
LOG = "memory budget 265 MiB (--memory-budget): 120 MiB held, 20 MiB of step buffers and KV cache; the experts (400 MiB) do not fit, so 100 MiB of them are cached in L1 and the rest read from the shards as needed"
stats = {"expert_usage": [[4] * 128 for _ in range(4)], "tokens": 64, "cache": {"l3_reads": 10, "l3_bytes_read": 10e6}}
check("physical bound of a run: slots from the set-up line (100 of 400 MiB: 128 of 512)",
      abs(b.run_bound(stats, LOG, 1, 1.2e9) - 50.0) < 1e-9)
check("physical bound of a run, held-out routing", abs(b.run_bound(stats, LOG, 1, 1.2e9, [[1 / 16] * 128 for _ in range(4)]) - 50.0) < 1e-9)
check("usage shares: counts over tokens", b.usage_shares(stats)[0][:2] == [4 / 64, 4 / 64])
check("physical bound of an all-resident run: none", b.run_bound(stats, "the experts (400 MiB) fit, all resident", 1, 1.2e9) is None)
check("physical bound of an all-resident run's stats (no cache counters): none",
      b.run_bound({"expert_usage": stats["expert_usage"], "tokens": 64}, "the experts (400 MiB) fit, all resident", 1, 1.2e9) is None)

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
    # The bound's rate: random expert-sized O_DIRECT reads across a model's shards (real files here).
    shards = os.path.join(os.getcwd(), f"harness-shards-{os.getpid()}")
    os.makedirs(shards, exist_ok=True)
    for i in range(2):
        with open(os.path.join(shards, f"experts-0000{i}.h5"), "wb") as f:
            f.write(os.urandom(8 << 20))
    t0 = time.time()
    rate = b.expert_read_rate(shards, 737280, threads=2, seconds=0.3)
    took = time.time() - t0
    for i in range(2):
        os.remove(os.path.join(shards, f"experts-0000{i}.h5"))
    os.rmdir(shards)
    check(f"expert read rate: some reads in its time ({rate / 1e9:.2f} GB/s in {took:.2f} s)", rate * 0.3 >= 737280 and took < 10)
print(f"{fails} failed")
sys.exit(1 if fails else 0)

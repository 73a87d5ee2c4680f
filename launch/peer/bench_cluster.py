#!/usr/bin/env python3
"""Beyond one node (issue 67): moerun across the emulated cluster's nodes against llama.cpp's RPC
backend on the same nodes, for models larger than one node's memory.

The cluster is cluster/local/up.sh's: K network namespaces on a bridge, each node's outgoing link
shaped (tbf), each node in its own cgroup v1 memory group (page cache counted). The model is a
Qwen3-MoE-shaped moe-hdf5 model with q4 experts (moerun synth) whose size is SIZE x one node's
memory; the peer's GGUF is the bf16 model of the same seed quantized by llama-quantize to Q4_K_M
(what a llama.cpp user picks at 4 bits; the bf16 model, not float32, so that the largest file stays
a few GB). Per run, page cache dropped first:
- moerun: cluster/local/mpirun.sh, 2 ranks a node (a router and an expert rank on each), its
  memory budget the node's cgroup limit shared by the node's ranks (--memory-budget auto), its LM
  head and attention in q4 (--quantize-dense q4, as Q4_K_M's); experts that the node's memory does
  not hold are read by the expert cache from the shards on the node's disk. With 3 nodes or more
  also "moerun, router node": the router alone on node 1 and an expert rank on each other node
  (--router-nodes 1), fewer processes on the shared cores;
- llama.cpp: rpc-server in every node (its memory group, 1 thread), peer_decode on node 1 with
  rpc= every server: every layer on the servers, split by their free memory (as llama-cli --rpc
  SERVERS -ngl 99). The servers hold their layers in memory: a model the nodes cannot hold
  together is OOM-killed, which the table says. Where it is, "llama.cpp fit" runs too, as a user
  would after the OOM: only the layers that fit on the servers (--server-fill, 0.8, of a node's memory on
  nodes 2..K, half that on node 1, which also runs the head: -ngl K --tensor-split A,B,...), the
  rest on the head's CPU from the mapped GGUF (--no-repack: llama.cpp's CPU backend otherwise copies
  them repacked into anonymous memory, which node 1 cannot hold), read from node 1's disk where its
  memory does not hold them.
Measured: prefill and decode tokens/s (moerun's --stats-json; peer_decode's timings), each node's
peak memory (memory.max_usage_in_bytes) and OOM kills, the bytes read from disk (the host's: the
nodes share its disk) and the bytes the nodes sent over their links per generated token (veth
counters over the whole run: for llama.cpp they include sending every layer's weights to the
servers at load), and moerun's tokens against a one-node unlimited run of the same requests. Runs
interleave moerun and the peer.

usage: bench_cluster.py --moerun BIN --rpc-bin DIR --peer-bin DIR --cluster DIR --work DIR --out DIR [options]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_offload import drop_caches, peer_decode_speeds, sh  # noqa: E402

CGROOT = "/sys/fs/cgroup/memory"
SHAPE = ["--family", "qwen3_moe", "--experts", "128", "--top-k", "8", "--hidden", "1024", "--intermediate", "384",
         "--heads", "8", "--kv-heads", "2", "--head-dim", "64", "--vocab", "4096", "--max-position", "2048",
         "--shards", "4", "--seed", "3"]
LAYER_BYTES = 128 * 3 * 1024 * 384 * 5 // 8  # one layer's q4 experts (scales included): the model's bulk


def model_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".h5"))


class Cluster:
    """The nodes of cluster/local/up.sh: their addresses, memory groups and link counters."""

    def __init__(self, tools, k, memory, link):
        self.tools, self.k = tools, k
        sh([os.path.join(tools, "up.sh"), str(k), "--node-memory", str(memory), "--link", link])
        cfg = open(os.path.join(tools, "config.sh")).read()
        env = lambda name, default: os.environ.get(f"MOERUN_CLUSTER_{name}", default)  # noqa: E731
        self.prefix = env("NS_PREFIX", re.search(r"NS_PREFIX=\$\{MOERUN_CLUSTER_NS_PREFIX:-([^}]*)\}", cfg).group(1))
        self.subnet = env("SUBNET", re.search(r"SUBNET_PREFIX=\$\{MOERUN_CLUSTER_SUBNET:-([^}]*)\}", cfg).group(1))
        self.groups = os.path.join(CGROOT, env("CGROUP_GROUP", f"{self.prefix}-cluster"))

    def host(self, i):
        return f"{self.subnet}.{i}"

    def group(self, i, name):
        return os.path.join(self.groups, f"{self.prefix}{i}", name)

    def reset(self):
        for i in range(1, self.k + 1):
            open(self.group(i, "memory.max_usage_in_bytes"), "w").write("0")

    def sent_bytes(self):
        return [int(open(f"/sys/class/net/veth-{self.prefix}{i}/statistics/rx_bytes").read()) for i in range(1, self.k + 1)]

    def peaks(self):
        return [int(open(self.group(i, "memory.max_usage_in_bytes")).read()) for i in range(1, self.k + 1)]

    def oom_kills(self):
        n = 0
        for i in range(1, self.k + 1):
            m = re.search(r"^oom_kill (\d+)", open(self.group(i, "memory.oom_control")).read(), re.M)
            n += int(m.group(1)) if m else 0
        return n

    def on(self, i, cmd, **kw):
        """cmd (a shell line) on node i, in its namespace and memory group."""
        return subprocess.Popen([os.path.join(self.tools, "rsh-agent.sh"), self.host(i), cmd], **kw)

    def down(self):
        subprocess.run([os.path.join(self.tools, "down.sh")], capture_output=True)


def disk_read_bytes():
    """Bytes read from this host's disks (every node's disk is the host's): /sys/block's devices
    with a device behind them (no loop, ram or zram), sectors of 512 bytes."""
    total = 0
    for d in os.listdir("/sys/block"):
        if os.path.exists(f"/sys/block/{d}/device"):
            total += int(open(f"/sys/block/{d}/stat").read().split()[2]) * 512
    return total


def measured(cluster, run):
    """Runs `run()` with the page cache dropped and the counters reset; returns its result with each
    node's peak memory, the OOM kills, the bytes the nodes sent and the bytes read from disk."""
    drop_caches()
    cluster.reset()
    kills, sent, read = cluster.oom_kills(), cluster.sent_bytes(), disk_read_bytes()
    t0 = time.time()
    row = run()
    row.update({"seconds": time.time() - t0, "peaks": cluster.peaks(), "killed": cluster.oom_kills() > kills,
                "net_bytes": sum(cluster.sent_bytes()) - sum(sent), "disk_bytes": disk_read_bytes() - read})
    return row


def run_moerun(o, cluster, model, reqs, ref, n, router_node=False):
    """router_node: the router alone on node 1 and an expert rank on each other node (--router-nodes 1);
    else a router and an expert rank on every node."""
    out, stats = os.path.join(o.work, "cluster.out"), os.path.join(o.work, "cluster-stats.json")
    for f in [stats] + [os.path.join(o.work, x) for x in os.listdir(o.work) if x.startswith("cluster.out")]:
        if os.path.exists(f):
            os.remove(f)
    layout = ["-np", str(cluster.k), "--map-by", "ppr:1:node"] if router_node else ["-np", str(2 * cluster.k), "--map-by", "ppr:2:node"]
    cmd = [os.path.join(cluster.tools, "mpirun.sh")] + layout + ["-x", "OMP_NUM_THREADS=1",
           o.moerun, "infer", "--model", model, "--input", reqs, "--output", out, "--stats-json", stats, "--routers-per-node", "1",
           "--max-batch-size", str(n), "--quantize-dense", "q4", "--comm-timeout", "120", "--quiet"] + \
        (["--router-nodes", "1"] if router_node else [])
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=o.run_timeout)
    row = {"ok": r.returncode == 0}
    if not row["ok"]:
        row["error"] = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1][:200]
        return row
    t = json.load(open(stats))["throughput"]
    row["prefill"] = t["prefill_tokens"] / t["prefill_seconds"]
    row["decode"] = t["decode_tokens"] / t["decode_seconds"]
    got = sorted(line for f in sorted(os.listdir(o.work)) if f.startswith("cluster.out") for line in open(os.path.join(o.work, f)))
    row["equal"] = got == sorted(open(ref))
    return row


def fitting_layers(o, k, gguf, layers):
    """peer_decode's split= and ngl= for the layers the servers hold within --server-fill of their memory."""
    layer_bytes = os.path.getsize(gguf) / layers
    others = int(o.server_fill * o.node_memory_bytes // layer_bytes)
    shares = [others // 2] + [others] * (k - 1)  # node 1 also runs the head, its mapped layers and KV cache
    return ",".join(map(str, shares)), min(layers, sum(shares))


def run_rpc(o, bin_dir, cluster, gguf, prompts, n, split="", ngl=None, options=""):
    """llama.cpp's or ik_llama.cpp's RPC backend (rpc-server and peer_decode from bin_dir)."""
    servers = [cluster.on(i, f"exec {bin_dir}/rpc-server -H {cluster.host(i)} -p 50052 -t 1", stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) for i in range(1, cluster.k + 1)]
    try:
        time.sleep(1.0)
        rpc = ",".join(f"{cluster.host(i)}:50052" for i in range(1, cluster.k + 1))
        head = cluster.on(1, f"exec {bin_dir}/peer_decode {gguf} 1 {o.new} rpc={rpc}{' split=' + split if split else ''}"
                          f"{f' ngl={ngl}' if ngl is not None else ''} {options} < {prompts}",
                          stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
        try:
            out, err = head.communicate(timeout=o.run_timeout)
        except subprocess.TimeoutExpired:
            head.kill()
            return {"ok": False, "error": f"over {o.run_timeout:.0f} s"}
        speeds = peer_decode_speeds(out) if head.returncode == 0 else None
        if not speeds:
            lost = [i + 1 for i, s in enumerate(servers) if s.poll() is not None]
            why = f"rpc-server of node {lost} gone" if lost else (err.strip().splitlines() or [f"exit {head.returncode}"])[-1][:200]
            return {"ok": False, "error": why}
        return {"ok": True, "prefill": speeds[0], "decode": speeds[1]}
    finally:
        for s in servers:
            s.kill()
            s.wait()
        subprocess.run(["pkill", "-9", "-f", f"{bin_dir}/rpc-server"], capture_output=True)


def prepare_models(o, size):
    """The q4 moe-hdf5 model of `size` x a node's memory and the Q4_K_M GGUF of its bf16 twin."""
    layers = max(2, round(size * o.node_memory_bytes / LAYER_BYTES))
    base = os.path.join(o.work, f"qwen3moe-L{layers}")
    q4, bf16 = base + "-q4", base + "-bfloat16"
    gguf = base + "-Q4_K_M.gguf"
    for path, dtype in ((q4, "q4"), (bf16, "bfloat16")):
        if path == bf16 and os.path.exists(gguf):
            continue
        if not os.path.exists(os.path.join(path, "model.h5")):
            print(f"# synth {path}", flush=True)
            sh([o.moerun, "synth", "--out", path, "--dtype", dtype, "--layers", str(layers), "--quiet"] + SHAPE)
    if not os.path.exists(gguf):
        sh([sys.executable, os.path.join(HERE, "moe_to_gguf.py"), bf16, bf16 + ".gguf"])
        sh([os.path.join(o.peer_bin, "llama-quantize"), bf16 + ".gguf", gguf, "Q4_K_M", "2"])
        os.remove(bf16 + ".gguf")
        sh(["rm", "-rf", bf16])
    return q4, gguf, layers


def requests(o, n, rng_seed=7):
    import random
    rng = random.Random(rng_seed + n)
    reqs, prompts = os.path.join(o.work, f"cluster-{n}.jsonl"), os.path.join(o.work, f"cluster-{n}.prompts")
    with open(reqs, "w") as f, open(prompts, "w") as fp:
        for i in range(n):
            p = [1] + [rng.randrange(3, 4096) for _ in range(o.prompt - 1)]
            f.write(json.dumps({"id": f"c{i}", "prompt_tokens": p, "max_new_tokens": o.new + 1}) + "\n")
            fp.write(" ".join(map(str, p)) + "\n")
    return reqs, prompts


def link_rate_bytes(link):
    """Bytes/s of up.sh's --link RATE[,DELAY] (e.g. 10gbit)."""
    m = re.match(r"(\d+)([kmg]?)bit", link.split(",")[0])
    return int(m.group(1)) * {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[m.group(2)] / 8


def table(o, results):
    lines = [f"# moerun vs llama.cpp's RPC backend{' and ik_llama.cpp' + chr(39) + 's' if getattr(o, 'ik_rpc_bin', '') else ''} on the emulated cluster: Qwen3-MoE shape (128 experts, top-8, hidden 1024), q4 / "
             f"Q4_K_M; node memory {o.node_memory}, links {o.link}; prompt {o.prompt}, {o.new} new tokens; medians of {o.runs} "
             f"interleaved runs",
             f"# moerun x: moerun's decode (a router and an expert rank a node) over the row's; on the router-node row, its own over "
             f"llama.cpp's (every layer on the servers, else the fit split)",
             f"# net and disk MB/tok: over a whole run (load included) per generated token; links' bound: the tokens/s at which "
             f"that many bytes a token fill every node's link ({o.link} each)",
             f"#{'nodes':>5} {'size':>4} {'MiB':>5} {'N':>2} {'who':>19} {'prefill':>8} {'decode':>8} {'moerun x':>8} {'peak MiB/node':>13} "
             f"{'net MB/tok':>10} {'links bound':>11} {'disk MB/tok':>11}  notes"]
    link_bytes_s = link_rate_bytes(o.link)
    keys = sorted({(r["nodes"], r["size"], r["n"]) for r in results})
    whos = ("moerun", "moerun, router node", "llama.cpp", "llama.cpp fit", "ik_llama.cpp", "ik_llama.cpp fit")
    for k, size, n in keys:
        runs = {who: [r for r in results if (r["nodes"], r["size"], r["n"], r["who"]) == (k, size, n, who)] for who in whos}
        med = {who: statistics.median([r["decode"] for r in rs if r["ok"]]) if any(r["ok"] for r in rs) else None
               for who, rs in runs.items()}
        llama = med.get("llama.cpp") or med.get("llama.cpp fit")  # every layer on the servers, else the fit split
        for who in whos:
            rs = runs[who]
            if not rs:
                continue
            ok = [r for r in rs if r["ok"]]
            pre = statistics.median([r["prefill"] for r in ok]) if ok else None
            peak = max(max(r["peaks"]) for r in rs) >> 20
            net = statistics.median([r["net_bytes"] / max(1, n * o.new) for r in rs]) / 1e6
            disk = statistics.median([r.get("disk_bytes", 0) / max(1, n * o.new) for r in rs]) / 1e6
            bound = f"{k * link_bytes_s / (net * 1e6):11.0f}" if net >= 0.01 else f"{'-':>11}"  # no traffic to speak of
            notes = []
            if who.startswith("moerun") and ok:
                notes.append("tokens equal one node's" if all(r.get("equal") for r in ok) else "tokens DIFFER")
            if "ngl" in rs[0]:
                notes.append(f"{rs[0]['ngl']} of {rs[0]['layers']} layers on the servers ({rs[0]['split']}), the rest mapped on node 1, no repack")
            if any(r["killed"] for r in rs):
                notes.append("OOM-killed")
            notes += sorted({r["error"] for r in rs if not r["ok"] and "error" in r})
            # A peer's row: moerun's (a router and an expert rank a node) over it. The router-node row:
            # its own over llama.cpp's (every layer on the servers, else its fit split).
            top = med["moerun, router node"] if who == "moerun, router node" else med["moerun"]
            peer = llama if who == "moerun, router node" else med[who]
            ratio = f"{top / peer:8.2f}" if who != "moerun" and top and peer else f"{'':>8}"
            text = f"{pre:8.1f} {med[who]:8.2f}" if ok else f"{'-':>8} {'-':>8}"
            lines.append(f" {k:>5} {size:>4} {rs[0]['model_mib']:>5} {n:>2} {who:>19} {text} {ratio} {peak:>13} {net:10.2f} {bound} {disk:11.2f}  {'; '.join(notes)}")
    return lines


def main():
    a = argparse.ArgumentParser()
    for name in ("--moerun", "--rpc-bin", "--peer-bin", "--cluster", "--work", "--out"):
        a.add_argument(name, required=True)
    a.add_argument("--nodes", default="2,3")
    a.add_argument("--sizes", default="1.5,3", help="model size / one node's memory")
    a.add_argument("--node-memory", default="768M")
    a.add_argument("--link", default="10gbit")
    a.add_argument("--batches", default="1,8,32")
    a.add_argument("--prompt", type=int, default=32)
    a.add_argument("--new", type=int, default=16)
    a.add_argument("--runs", type=int, default=2)
    a.add_argument("--run-timeout", type=float, default=300)
    a.add_argument("--server-fill", type=float, default=0.8,
                   help="where every layer on the servers is OOM-killed: the share of a node's memory an rpc-server's layers fill")
    a.add_argument("--ik-rpc-bin", default="", help="also ik_llama.cpp's RPC backend (its rpc-server and peer_decode here)")
    o = a.parse_args()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    o.node_memory_bytes = int(float(o.node_memory[:-1]) * units[o.node_memory[-1].upper()]) if o.node_memory[-1].upper() in units \
        else int(o.node_memory)
    os.makedirs(o.work, exist_ok=True)
    os.makedirs(o.out, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    results = []
    for size in [float(x) for x in o.sizes.split(",")]:
        model, gguf, layers = prepare_models(o, size)
        mib = model_bytes(model) >> 20
        for n in [int(x) for x in o.batches.split(",")]:
            reqs, prompts = requests(o, n)
            ref = reqs + ".ref"
            sh([o.moerun, "infer", "--model", model, "--input", reqs, "--output", ref, "--quantize-dense", "q4", "--quiet",
                "--max-batch-size", str(n)], env=env)  # one node, no limit: the reference tokens
            for k in [int(x) for x in o.nodes.split(",")]:
                cluster = Cluster(o.cluster, k, o.node_memory, o.link)
                try:
                    # With 3 nodes or more, also the router alone on node 1 (the others hold the experts).
                    engines = ["moerun"] + (["moerun, router node"] if k >= 3 else []) + ["llama.cpp"] + \
                        (["ik_llama.cpp"] if o.ik_rpc_bin else [])
                    fit_split, fit_ngl = fitting_layers(o, k, gguf, layers)
                    for run in range(o.runs):
                        i = 0
                        while i < len(engines):  # an engine added in this run runs in it too
                            who = engines[i]
                            i += 1
                            peer_bin = o.ik_rpc_bin if who.startswith("ik_") else o.rpc_bin
                            go = (lambda: run_moerun(o, cluster, model, reqs, ref, n, who != "moerun")) if who.startswith("moerun") else \
                                (lambda: run_rpc(o, peer_bin, cluster, gguf, prompts, n, fit_split, fit_ngl,
                                                 "" if who.startswith("ik_") else "no-repack") if who.endswith(" fit")
                                 else run_rpc(o, peer_bin, cluster, gguf, prompts, n))
                            row = measured(cluster, go)
                            if not who.startswith("moerun") and not who.endswith(" fit") and row["killed"] and f"{who} fit" not in engines:
                                engines.append(f"{who} fit")
                            if who.endswith(" fit"):
                                row.update({"split": fit_split, "ngl": fit_ngl})
                            row.update({"who": who, "nodes": k, "size": size, "n": n, "run": run, "layers": layers, "model_mib": mib})
                            results.append(row)
                            json.dump({"results": results, "args": {k2: v for k2, v in vars(o).items()}},
                                      open(os.path.join(o.out, "cluster.json"), "w"), indent=1)
                            print(f"#   {k} nodes, size {size} ({mib} MiB), N={n} {who}: " +
                                  (f"decode {row['decode']:.2f} prefill {row['prefill']:.1f} tokens/s" if row["ok"] else row["error"]) +
                                  f", peak {max(row['peaks']) >> 20} MiB/node" + (", OOM-killed" if row["killed"] else ""), flush=True)
                finally:
                    cluster.down()
    lines = table(o, results)
    print("\n".join(lines), flush=True)
    open(os.path.join(o.out, "cluster.txt"), "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

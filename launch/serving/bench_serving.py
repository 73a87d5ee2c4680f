#!/usr/bin/env python3
"""The serving features of issue 14, measured on this machine with `moerun infer` (launch/bench-serving.sh).

Each comparison runs its variants interleaved, --runs times, on the same model and requests, and
reports medians from `--stats-json`; outputs that must be equal are compared. Sections:
  warmup    expert-cache warm-up: id-order vs hotness vs none (LRU), skewed model, L1 = 25% of experts
  batching  FIFO vs minhash batching on a topic workload (synth --gate-topics 4), L1 = 25%
  prefix    prefix cache off vs on, 32 requests sharing a 192-token system prompt
  routing   dynamic top-k (--top-p-experts) and per-phase capacity on the skewed model
  swap      hot-swap pause and background load per expert: 6 MiB f32 experts and a 352 MB bf16 one
"""
import argparse, json, os, random, statistics, subprocess, sys, time


# Table columns several sections share: (key, header, format, getter from a run's stats).
HIT = ("l1_hit_rate", "L1 hit rate", ".3f", lambda s: s["cache"]["l1_hit_rate"])
STALL = ("stall_s", "stall (s)", ".3f", lambda s: s["cache"]["stall_s"])
TOKENS = ("tokens_per_s", "tokens/s", ".0f", lambda s: s["tokens_per_s"])


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


class Bench:
    def __init__(self, a):
        self.a = a
        self.moerun = a.moerun
        os.makedirs(a.work, exist_ok=True)
        self.results = {}
        self.lines = []

    def say(self, s=""):
        print(s, flush=True)
        self.lines.append(s)

    def model(self, name, *args):
        d = os.path.join(self.a.work, name)
        if not os.path.exists(os.path.join(d, "model.h5")):
            sh([self.moerun, "synth", "--out", d, "--quiet", *args])
        return d

    def requests(self, name, rows):
        p = os.path.join(self.a.work, name + ".jsonl")
        with open(p, "w") as f:
            for i, (prompt, new) in enumerate(rows):
                f.write(json.dumps({"id": f"{name}{i}", "prompt_tokens": prompt, "max_new_tokens": new}) + "\n")
        return p

    def infer(self, model, reqs, tag, *opts):
        tag = "".join(c if c.isalnum() or c in "-." else "_" for c in tag)
        out = os.path.join(self.a.work, tag + ".jsonl")
        stats = os.path.join(self.a.work, tag + ".stats.json")
        t = time.time()
        sh([self.moerun, "infer", "--model", model, "--input", reqs, "--output", out, "--stats-json", stats, "--quiet", *opts])
        wall = time.time() - t
        s = json.load(open(stats))
        s["wall_s"] = wall
        return s, open(out).read()

    def compare(self, model, reqs, variants, same_output=True):
        """variants: {name: [options]}; returns {name: [stats per run]}, run interleaved."""
        got = {v: [] for v in variants}
        outputs = {}
        for r in range(self.a.runs):
            for v, opts in variants.items():
                s, out = self.infer(model, reqs, f"{v}-{r}", *opts)
                got[v].append(s)
                outputs.setdefault(v, out)
        if same_output:
            first = next(iter(outputs.values()))
            for v, out in outputs.items():
                if out != first:
                    sys.exit(f"bench-serving: variant {v} gave another output than {next(iter(outputs))}")
        return got

    @staticmethod
    def med(runs, f):
        return statistics.median(f(s) for s in runs)

    def table(self, first, width, got, cols):
        """Prints a header and one row per variant: the median of each column over the runs.
        cols: (key, header, format, getter from a run's stats). Returns {variant: {key: median}}."""
        self.say(f"{first:<{width}}" + "".join(f"{h:>{len(h) + 2}}" for _, h, _, _ in cols))
        rows = {}
        for v, runs in got.items():
            r = {k: self.med(runs, f) for k, _, _, f in cols}
            rows[v] = r
            self.say(f"{v:<{width}}" + "".join(f"{r[k]:>{len(h) + 2}{fmt}}" for k, h, fmt, _ in cols))
        return rows

    # -- sections -------------------------------------------------------------------------------
    SKEWED = ["--layers", "4", "--experts", "16", "--top-k", "2", "--hidden", "512", "--heads", "8", "--kv-heads", "4",
              "--head-dim", "64", "--intermediate", "1024", "--vocab", "1000", "--max-position", "512", "--shards", "2"]
    L1 = str(16 * 3 * 512 * 1024 * 4)  # 16 of the 64 experts

    def warmup(self):
        m = self.model("skewed", *self.SKEWED, "--seed", "3", "--gate-skew", "1.5")
        rng = random.Random(2)
        reqs = self.requests("warm", [([rng.randrange(1, 999) for _ in range(8)], 48) for _ in range(32)])
        common = ["--l1-bytes", self.L1, "--max-batch-size", "8"]
        got = self.compare(m, reqs, {w: common + ["--warmup", w] for w in ("id-order", "hotness", "none")})
        self.say("## warm-up: skewed model (4 layers x 16 experts of 6 MiB, gate skew 1.5), L1 = 16 experts (25%),")
        self.say(f"## 32 requests (prompt 8, 48 new), batch 8; median of {self.a.runs} interleaved runs")
        row = self.table("warm-up", 10, got, [
            ("ttft_s", "first token (s)", ".3f", lambda s: s["throughput"]["time_to_first_token_s"]), HIT, STALL, TOKENS,
            ("warmup_loads", "warm-up loads", ".0f", lambda s: s["cache"]["warmup_loads"])])
        h, i = row["hotness"], row["id-order"]
        self.say(f"hotness / id-order: first token {h['ttft_s'] / i['ttft_s']:.2f}x the time, L1 hit rate "
                 f"{h['l1_hit_rate'] - i['l1_hit_rate']:+.3f}, tokens/s {h['tokens_per_s'] / i['tokens_per_s']:.2f}x")
        self.results["warmup"] = row

    def batching(self):
        m = self.model("topics", *self.SKEWED, "--seed", "3", "--gate-skew", "2", "--gate-topics", "4")
        rng = random.Random(1)
        rows = []
        for _ in range(64):
            t = rng.randrange(4)
            rows.append(([rng.randrange(250 * t, 250 * t + 250) for _ in range(16)], 32))
        reqs = self.requests("topics", rows)
        common = ["--l1-bytes", self.L1, "--max-batch-size", "8"]
        got = self.compare(m, reqs, {"fifo": common, "minhash": common + ["--batching", "minhash"]})
        self.say()
        self.say("## batching: topic model (4 topics, each with its own hot experts), 64 requests of one topic each")
        self.say(f"## (prompt 16, 32 new), batch 8, L1 = 16 experts (25%); median of {self.a.runs} interleaved runs")
        row = self.table("batching", 10, got, [
            HIT, STALL, ("l3_reads", "L3 reads", ".0f", lambda s: s["cache"]["l3_reads"]), TOKENS,
            ("decode_tokens_per_s", "decode tok/s", ".0f", lambda s: s["throughput"]["decode_tokens"] / s["throughput"]["decode_seconds"])])
        f, mh = row["fifo"], row["minhash"]
        self.say(f"minhash / fifo: L1 hit rate {mh['l1_hit_rate'] - f['l1_hit_rate']:+.3f}, tokens/s {mh['tokens_per_s'] / f['tokens_per_s']:.2f}x")
        self.results["batching"] = row

    def prefix(self):
        m = self.model("skewed", *self.SKEWED, "--seed", "3", "--gate-skew", "1.5")
        rng = random.Random(3)
        system = [1] + [rng.randrange(2, 999) for _ in range(191)]
        reqs = self.requests("prefix", [(system + [rng.randrange(2, 999) for _ in range(16)], 8) for _ in range(32)])
        got = self.compare(m, reqs, {"off": [], "on": ["--prefix-cache-mb", "512"]})
        self.say()
        self.say("## prefix cache: 32 requests = one 192-token system prompt + 16 own tokens, 8 new each; skewed model,")
        self.say(f"## all experts resident; median of {self.a.runs} interleaved runs")
        row = self.table("prefix", 8, got, [
            ("prefill_tokens", "prompt tokens computed", ".0f", lambda s: s["throughput"]["prefill_tokens"]),
            ("skipped", "skipped", ".0f", lambda s: s.get("prefix_cache", {}).get("skipped_prefill_tokens", 0)),
            ("prefill_s", "prefill (s)", ".3f", lambda s: s["throughput"]["prefill_seconds"]),
            ("seconds", "run (s)", ".3f", lambda s: s["seconds"]), TOKENS])
        self.say(f"on / off: run time {row['on']['seconds'] / row['off']['seconds']:.2f}x, prefill time "
                 f"{row['on']['prefill_s'] / row['off']['prefill_s']:.2f}x")
        self.results["prefix"] = row

    def routing(self):
        m = self.model("skewed", *self.SKEWED, "--seed", "3", "--gate-skew", "1.5")
        rng = random.Random(4)
        reqs = self.requests("route", [([rng.randrange(1, 999) for _ in range(32)], 32) for _ in range(32)])
        variants = {f"top-p {p}": ["--top-p-experts", p] for p in ("1.0", "0.9", "0.7", "0.5")}
        variants["capacity 1.0"] = ["--capacity-factor", "1.0", "--overflow", "drop"]
        variants["capacity 1.0/1.25"] = ["--capacity-factor-prefill", "1.0", "--capacity-factor-decode", "1.25", "--overflow", "drop"]
        got = self.compare(m, reqs, variants, same_output=False)
        self.say()
        self.say("## routing: dynamic top-k and per-phase capacity; skewed model, all experts resident,")
        self.say(f"## 32 requests (prompt 32, 32 new); median of {self.a.runs} interleaved runs")
        row = self.table("routing", 20, got, [
            ("experts_per_token", "experts/token", ".3f", lambda s: s["experts_per_token"]),
            ("expert_activation_rate", "expert act.", ".4f", lambda s: s["expert_activation_rate"]),
            ("dropped_fraction", "dropped", ".4f", lambda s: s["dropped_fraction"]), TOKENS])
        base = row["top-p 1.0"]["tokens_per_s"]
        self.say("tokens/s against top-2: " + ", ".join(f"{v} {r['tokens_per_s'] / base:.2f}x" for v, r in row.items()))
        self.results["routing"] = row

    def swap(self):
        self.say()
        self.say("## hot swap: every expert replaced by a control file present at the start (pause = packing between")
        self.say(f"## steps; load = reading and verifying in the background); median of {self.a.runs} runs")
        self.say(f"{'experts':<34}{'count':>6}{'pause ms/expert':>17}{'load ms/expert':>16}")
        row = {}
        big = ["--layers", "1", "--experts", "2", "--top-k", "1", "--hidden", "4096", "--heads", "32", "--kv-heads", "8",
               "--head-dim", "128", "--intermediate", "14336", "--vocab", "256", "--max-position", "64", "--shards", "1",
               "--dtype", "bfloat16"]
        cases = [("6 MiB f32 (512 x 1024)", self.model("skewed", *self.SKEWED, "--seed", "3", "--gate-skew", "1.5"),
                  self.model("skewed-b", *self.SKEWED, "--seed", "4", "--gate-skew", "1.5")),
                 ("352 MB bf16 (4096 x 14336)", self.model("big-a", *big, "--seed", "1"), self.model("big-b", *big, "--seed", "2"))]
        reqs = self.requests("swap", [([1, 2, 3], 4)])
        for name, a, b in cases:
            shards = sorted(f for f in os.listdir(b) if f.startswith("experts-"))
            ctl = os.path.join(self.a.work, "swap-" + os.path.basename(b) + ".json")
            with open(ctl, "w") as f:
                json.dump({"swaps": [{"shard": os.path.join(b, s), "experts": "all"} for s in shards]}, f)
            runs = [self.infer(a, reqs, f"swap-{r}", "--swap-control", ctl)[0]["hot_swap"] for r in range(self.a.runs)]
            n = runs[0]["experts"]
            r = {"experts": n, "pause_ms_per_expert": statistics.median(h["pause_ms_per_expert"] for h in runs),
                 "load_ms_per_expert": statistics.median(1e3 * h["load_seconds"] / n for h in runs)}
            row[name] = r
            self.say(f"{name:<34}{n:>6}{r['pause_ms_per_expert']:>17.2f}{r['load_ms_per_expert']:>16.2f}")
        self.results["swap"] = row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--moerun", required=True)
    p.add_argument("--work", required=True, help="models and run outputs (kept: models are reused)")
    p.add_argument("--out", required=True, help="serving.txt and serving.json go here")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--only", default="warmup,batching,prefix,routing,swap")
    a = p.parse_args()
    b = Bench(a)
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
    b.say(f"# moerun serving features (issue 14): {model}, {os.cpu_count()} cores, runs {a.runs}")
    for section in a.only.split(","):
        getattr(b, section)()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "serving.txt"), "w") as f:
        f.write("\n".join(b.lines) + "\n")
    with open(os.path.join(a.out, "serving.json"), "w") as f:
        json.dump(b.results, f, indent=2)


if __name__ == "__main__":
    main()

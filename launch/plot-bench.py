#!/usr/bin/env python3
"""Turns moerun benchmark CSV files into PNG plots (headless).

Usage: launch/plot-bench.py [--out DIR] FILE.csv [FILE.csv ...]

Each file is recognised by its header:
  `moerun bench a2a --csv`            -> a2a-bandwidth.png: algbw vs size per rank, mpi vs hier, per pattern
  `moerun bench a2a --sweep --csv`    -> sweep-a2a-throughput.png, sweep-a2a-efficiency.png
  `moerun bench infer --sweep --csv`  -> sweep-infer-throughput.png, sweep-infer-efficiency.png,
                                         sweep-infer-phases.png (router phase breakdown, stacked bars)
Every PNG is WIDTH x HEIGHT pixels (below), so tests and docs can rely on the size.
"""
import sys

if sys.argv[1:2] in (["-h"], ["--help"]):  # before matplotlib: the usage needs nothing installed
    print(__doc__)
    sys.exit(0)
import argparse
import csv
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

WIDTH, HEIGHT, DPI = 1000, 500, 100
PHASES = ["attention", "gate", "pack", "exchange", "wait_experts", "expert_compute", "combine", "head"]


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot-bench: {path}: no rows")
    return rows


def figure(ncols=1):
    fig, axes = plt.subplots(1, ncols, figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI, squeeze=False)
    return fig, list(axes[0])


def save(fig, out, name):
    path = os.path.join(out, name)
    fig.tight_layout()
    # A fixed canvas (no bbox_inches="tight"): every PNG has the documented size in pixels.
    fig.savefig(path + ".tmp.png", dpi=DPI)
    os.replace(path + ".tmp.png", path)
    plt.close(fig)
    print(f"plot-bench: wrote {path}")
    return path


def size_label(b):
    b = int(b)
    for unit, n in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n:
            return f"{b // n} {unit}"
    return f"{b} B"


def plot_a2a(rows, out):
    patterns = sorted({r["pattern"] for r in rows})
    fig, axes = figure(len(patterns))
    for ax, pattern in zip(axes, patterns):
        for algo in sorted({r["algo"] for r in rows}):
            pts = sorted((int(r["bytes_per_rank"]), float(r["algbw_gbps"])) for r in rows
                         if r["pattern"] == pattern and r["algo"] == algo)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=algo)
        ax.set_xscale("log", base=2)
        sizes = sorted({int(r["bytes_per_rank"]) for r in rows})
        ax.set_xticks(sizes[::2])
        ax.set_xticklabels([size_label(s) for s in sizes[::2]], rotation=45, fontsize=7)
        ax.set_title(f"{pattern}, {rows[0]['ranks']} ranks / {rows[0]['nodes']} nodes")
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel("algbw (GB/s)")
        ax.grid(alpha=0.3)
        ax.legend()
    return [save(fig, out, "a2a-bandwidth.png")]


def series(rows, scaling):
    """(label, [(ranks, row)]) per algo and node layout, for one scaling mode."""
    out = {}
    for r in rows:
        if r["scaling"] != scaling:
            continue
        nodes = f"{r['nodes']} node" + ("s" if int(r["nodes"]) > 1 else "")
        label = f"{r['algo']}, {nodes}" if r["bench"] == "a2a" else nodes
        out.setdefault(label, []).append((int(r["ranks"]), r))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in sorted(out.items())}


def plot_sweep(rows, out):
    bench = rows[0]["bench"]
    metric, ylabel = ("algbw_gbps", "algbw (GB/s)") if bench == "a2a" else ("tokens_per_s", "tokens/s")
    written = []
    for name, key, label in (("throughput", metric, ylabel), ("efficiency", "efficiency", "efficiency vs smallest point")):
        fig, axes = figure(2)
        for ax, scaling in zip(axes, ("weak", "strong")):
            for lab, pts in series(rows, scaling).items():
                ax.plot([p[0] for p in pts], [float(p[1][key]) for p in pts], marker="o", label=lab)
            if key == "efficiency":
                ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
            ax.set_ylim(bottom=0)
            ax.set_title(f"{bench}: {scaling} scaling")
            ax.set_xlabel("ranks")
            ax.set_ylabel(label)
            ax.set_xscale("log", base=2)
            ranks = sorted({int(r["ranks"]) for r in rows})
            ax.set_xticks(ranks)
            ax.set_xticklabels([str(r) for r in ranks])
            ax.grid(alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=8)
        written.append(save(fig, out, f"sweep-{bench}-{name}.png"))
    if bench == "infer":
        fig, axes = figure(2)
        for ax, scaling in zip(axes, ("weak", "strong")):
            pts = [r for r in rows if r["scaling"] == scaling]
            labels = [f"{r['ranks']}/{r['nodes']}" for r in pts]
            bottom = [0.0] * len(pts)
            for phase in PHASES:
                col = "phase_s_" + phase
                vals = [float(r.get(col) or 0) for r in pts]
                if any(vals):
                    ax.bar(labels, vals, bottom=bottom, label=phase)
                    bottom = [b + v for b, v in zip(bottom, vals)]
            ax.set_title(f"router phases, {scaling} scaling")
            ax.set_xlabel("ranks/nodes")
            ax.set_ylabel("seconds (max over routers)")
            ax.tick_params(axis="x", labelsize=8)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        written.append(save(fig, out, "sweep-infer-phases.png"))
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="CSV files from moerun bench --csv")
    ap.add_argument("--out", default=".", help="directory for the PNGs (default: .)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for path in args.files:
        if not os.path.exists(path):
            sys.exit(f"plot-bench: {path}: no such file")
        rows = read_rows(path)
        cols = rows[0].keys()
        if "scaling" in cols:
            plot_sweep(rows, args.out)
        elif "pattern" in cols:
            plot_a2a(rows, args.out)
        else:
            sys.exit(f"plot-bench: {path}: not a moerun bench CSV (no 'scaling' or 'pattern' column)")


if __name__ == "__main__":
    main()

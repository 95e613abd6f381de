#!/usr/bin/env python3
"""Turns benchmark JSON lines into PNG charts.

    python3 bench/plot.py RESULTS.jsonl... --out DIR [--threads 1]

Reads the lines of `octattn bench --json` (the --limits line included) and of
bench/peers.py, in any mix, and writes:
  prefill_d<D>.png  causal prefill, GFLOP/s of useful work against T, one chart per head
                    size, octattn beside each peer (the best round of each case), with
                    the machine's measured FMA peak as a line;
  decode.png        decode (q_len 1), K/V GB/s against kv length, per thread count,
                    with the measured read bandwidth as a line.
Every --limits line of the input draws the limit (a band when there are several, e.g.
before and after). Cases are filtered to one thread count (prefill) and plain causal
masks. Needs
matplotlib (pip install matplotlib).
"""
import argparse
import collections
import json
import os
import sys


def load(paths):
    rows, limits = [], []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                d = json.loads(line)
                if d.get("limits"):
                    limits.append(d)
                elif "seconds_median" in d and "error" not in d:
                    rows.append(d)
    return rows, limits


def band(ax, limits, key, what):
    """The machine's measured limit: a line, or a band when the run measured it more
    than once (before and after, say)."""
    values = [d[key] for d in limits if key in d]
    if not values:
        return
    lo, hi = min(values), max(values)
    if hi - lo < 0.005 * hi:
        ax.axhline(hi, color="gray", linestyle="--", label=f"{what} {hi:.1f}")
    else:
        ax.axhspan(lo, hi, color="gray", alpha=0.25, label=f"{what} {lo:.1f}-{hi:.1f}")


def who(d):
    """The series a line belongs to: a peer, or octattn's algorithm."""
    if "peer" in d:
        return d["peer"]
    return "octattn" if d.get("algo") == "fused" else "octattn " + d.get("algo", "?")


def prefill(rows, limits, threads, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    best = collections.defaultdict(dict)  # (dim, heads) -> series -> {T: gflops}
    for d in rows:
        if d.get("q_len", 0) <= 1 or d.get("q_len") != d.get("kv_len"):
            continue
        if d.get("threads", 1) != threads or d.get("window", 0) or d.get("stride", 0):
            continue
        if d.get("mods", "none") != "none" or d.get("causal", 1) != 1:
            continue
        key = (d["head_dim"], f'{d["q_heads"]}/{d["kv_heads"]}')
        series = best[key].setdefault(who(d), {})
        t = d["q_len"]
        series[t] = max(series.get(t, 0.0), d["gflops"])
    written = []
    for dim in sorted({k[0] for k in best}):
        keys = sorted(k for k in best if k[0] == dim)
        fig, axes = plt.subplots(1, len(keys), figsize=(6 * len(keys), 4.2), squeeze=False)
        for ax, key in zip(axes[0], keys):
            for name, pts in sorted(best[key].items()):
                ts = sorted(pts)
                ax.plot(ts, [pts[t] for t in ts], marker="o", label=name)
            band(ax, limits, "fma_peak_gflops", "FMA peak, GFLOP/s")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("T (causal, q_len = kv_len)")
            ax.set_ylabel("GFLOP/s of useful work")
            ax.set_title(f"prefill, D={dim}, heads {key[1]}, {threads} thread(s)")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        path = os.path.join(out, f"prefill_d{dim}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def decode(rows, limits, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = collections.defaultdict(dict)
    for d in rows:
        if d.get("q_len") != 1 or "kv_gbps" not in d or d.get("mods", "none") != "none":
            continue
        name = f'{who(d)}, {d.get("threads", 1)} thread(s), D={d["head_dim"]}'
        kv = d["kv_len"]
        series[name][kv] = max(series[name].get(kv, 0.0), d["kv_gbps"])
    if not series:
        return []
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, pts in sorted(series.items()):
        ks = sorted(pts)
        ax.plot(ks, [pts[k] for k in ks], marker="o", label=name)
    band(ax, limits, "read_gbps", "read bandwidth, GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("kv length (one query token)")
    ax.set_ylabel("K and V read, GB/s")
    ax.set_title("decode")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "decode.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("results", nargs="+", help="JSON-lines files")
    p.add_argument("--out", required=True, help="folder for the PNG files")
    p.add_argument("--threads", type=int, default=1, help="thread count of the prefill charts")
    args = p.parse_args()
    rows, limits = load(args.results)
    if not rows:
        sys.exit("plot.py: no benchmark lines in the input")
    os.makedirs(args.out, exist_ok=True)
    for path in prefill(rows, limits, args.threads, args.out) + decode(rows, limits, args.out):
        print(path)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Draws the figures of one store-bench run.

Reads a store-DATE.json written by `store-bench` and writes, next to it:

- store-DATE-latency.png: median latency against object size, log-log:
  create+write+seal and get+read through the store, with the heap baselines
  measured in the same run (memcpy of the same bytes, and the same read over
  a heap buffer). The vertical gap between a store line and its baseline is
  the store's overhead; at small sizes it is the daemon round trips, at large
  sizes the lines should meet.
- store-DATE-bandwidth.png: large-write bandwidth, store vs memcpy, per
  object size, each store bar labelled with its store/memcpy ratio.

Usage: bench/store/plot.py bench/results/store-DATE.json
"""

import sys
from pathlib import Path

# bench/common/plotting.py
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))

from plotting import main as plot_main, plt, save, size_axis  # noqa: E402


def machine_line(report):
    m = report.get("machine", {})
    cpu = m.get("cpu_model") or "unknown CPU"
    nproc = m.get("nproc") or "?"
    line = f"{cpu}, {nproc} CPUs; {report['plan']['mode']} run, {report['plan']['reps']} reps per point"
    scheduling = report.get("store", {}).get("scheduling", "")
    if scheduling.startswith("SCHED_FIFO"):
        line += "; real-time scheduling"
    return line


def plot_latency(report, path):
    rows = report["latency"]
    sizes = [r["size_bytes"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 6))
    series = [
        ("create+write+seal (store)", "create_write_seal", "o-", "tab:blue"),
        ("get+read (store)", "get_read", "s-", "tab:orange"),
        ("memcpy (heap baseline)", "memcpy", "o--", "tab:blue"),
        ("read (heap baseline)", "heap_read", "s--", "tab:orange"),
    ]
    for label, key, style, color in series:
        ax.plot(sizes, [r[key]["median_us"] for r in rows], style, color=color, label=label, alpha=1.0 if "store" in label else 0.6)
    size_axis(ax, sizes, "object size (KB = 10^3 bytes, MB = 10^6 bytes)")
    ax.set_ylabel("median latency (µs, log scale)")
    ax.set_title(f"hprm-store latency by object size, {report['date']}\n{machine_line(report)}", fontsize=11)
    ax.legend()
    save(fig, path)


def plot_bandwidth(report, path):
    rows = report["bandwidth"]
    labels = [r["label"] for r in rows]
    x = range(len(rows))
    width = 0.38
    fig, ax = plt.subplots(figsize=(8, 5.5))
    store = ax.bar([i - width / 2 for i in x], [r["store_gbps"] for r in rows], width, label="store: create + copy + seal", color="tab:blue")
    ax.bar([i + width / 2 for i in x], [r["memcpy_gbps"] for r in rows], width, label="memcpy into a heap buffer", color="tab:gray")
    for bar, r in zip(store, rows):
        ax.annotate(f"{r['ratio'] * 100:.0f}% of memcpy", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    xytext=(0, 4), textcoords="offset points", ha="center", fontsize=9)
    ax.set_xticks(list(x))
    ax.set_xticklabels(labels)
    ax.set_xlabel("object size (MB = 10^6 bytes)")
    ax.set_ylabel("write bandwidth (GB/s = 10^9 bytes/s, median)")
    target = (report.get("targets") or {}).get("large_write") or {}
    verdict = f"; target >= {target['threshold'] * 100:.0f}%: {'PASS' if target['pass'] else 'MISS'} ({target['ratio'] * 100:.1f}%)" if target else ""
    ax.set_title(f"hprm-store large writes vs memcpy, {report['date']}{verdict}\n{machine_line(report)}", fontsize=11)
    ax.set_ylim(0, max(max(r["store_gbps"], r["memcpy_gbps"]) for r in rows) * 1.2)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="lower right")
    save(fig, path)


def figures(report, stem):
    """Both figures, for every run."""
    return [(plot_latency, Path(f"{stem}-latency.png")), (plot_bandwidth, Path(f"{stem}-bandwidth.png"))]


if __name__ == "__main__":
    plot_main("bench/store/plot.py", __doc__.splitlines()[0], "store", figures)

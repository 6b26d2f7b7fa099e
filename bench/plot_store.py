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

Usage: plot_store.py bench/results/store-DATE.json
"""

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on build machines
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter  # noqa: E402


def size_label(n):
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000} MB"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000} KB"
    return f"{n} B"


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
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(round(v)))))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    # 5, 10, 25 and 50 MB sit close together on a log axis.
    plt.setp(ax.get_xticklabels(), rotation=45, ha="right")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel("object size (KB = 10^3 bytes, MB = 10^6 bytes)")
    ax.set_ylabel("median latency (µs, log scale)")
    ax.set_title(f"hprm-store latency by object size, {report['date']}\n{machine_line(report)}", fontsize=11)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path, help="a store-DATE.json written by store-bench")
    args = parser.parse_args()
    try:
        report = json.loads(args.json.read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"plot_store.py: cannot read {args.json}: {e}")
    stem = args.json.with_suffix("")  # .../store-DATE
    outputs = [(plot_latency, Path(f"{stem}-latency.png")), (plot_bandwidth, Path(f"{stem}-bandwidth.png"))]
    for plot, path in outputs:
        plot(report, path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

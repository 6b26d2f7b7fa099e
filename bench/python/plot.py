#!/usr/bin/env python3
"""Draws the figures of one Python benchmark run (bench/python/pybench.py).

Reads a python-DATE.json and writes, next to it:

- python-DATE-write-delay.png: median write delay against array size,
  log-log, every system of workload 1 (HPRM, HPRM through a fresh
  connection, Plasma put, Plasma create+copy+seal, Python shared_memory,
  and the memcpy floor), with bars up to the p99.
- python-DATE-serialization.png: serialize and deserialize throughput of a
  5 MB array per system (MB/s, log scale: the systems span five orders of
  magnitude), each bar labelled with its value.
- python-DATE-deserialization.png: deserialization time against array size,
  log-log: HPRM's zero-copy decode stays flat (O(1)), decoders that copy
  climb with the size.

Usage: bench/python/plot.py bench/results/python-DATE.json
"""

import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on build machines
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter  # noqa: E402

MB = 1_000_000

# One look per system across the three figures: HPRM in blue, solid.
STYLE = {
    "hprm": dict(color="tab:blue", marker="o", linestyle="-", linewidth=2.2),
    "hprm_cold": dict(color="tab:blue", marker="o", linestyle=":", alpha=0.7),
    "hprm_relay": dict(color="tab:cyan", marker="o", linestyle="-"),
    "hprm_alloc": dict(color="navy", marker="o", linestyle="-"),
    "hprm_born": dict(color="navy", marker="s", linestyle=":"),
    "plasma_put": dict(color="tab:orange", marker="s", linestyle="-"),
    "plasma_create": dict(color="tab:orange", marker="s", linestyle="--"),
    "shm": dict(color="tab:red", marker="^", linestyle="-"),
    "pickle_inband": dict(color="tab:green", marker="D", linestyle="-"),
    "pickle_oob": dict(color="tab:green", marker="D", linestyle="--"),
    "rclpy": dict(color="tab:purple", marker="v", linestyle="-"),
    "rclpy_naive": dict(color="tab:purple", marker="v", linestyle=":"),
    "memcpy": dict(color="tab:gray", marker="", linestyle="--"),
}
WRITE_ORDER = ["hprm", "plasma_put", "plasma_create", "shm", "hprm_cold", "memcpy"]
SER_ORDER = ["hprm", "hprm_born", "hprm_alloc", "hprm_relay", "pickle_inband", "pickle_oob", "rclpy", "rclpy_naive", "memcpy"]


def size_label(n):
    return f"{n / MB:g} MB" if n >= MB else f"{n / 1000:g} KB"


def machine_line(report):
    m = report.get("machine", {})
    la = report.get("loadavg_start")
    load = f"; load {la[0]:.1f}" if la else ""
    return f"{m.get('cpu_model', 'unknown CPU')}, {m.get('nproc', '?')} CPUs; {report['plan']['mode']} run{load}"


def verdict(report, index):
    targets = report.get("targets") or []
    if len(targets) <= index:
        return ""
    met = targets[index]["met"]
    return "target met" if met else ("target missed" if met is False else "target not judged")


def log_axes(ax, sizes):
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(round(v)))))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.grid(True, which="both", alpha=0.3)


def plot_write_delay(report, path):
    systems = report["write_delay"]["systems"]
    fig, ax = plt.subplots(figsize=(9, 6))
    sizes = set()
    for key in [k for k in WRITE_ORDER if k in systems]:
        pts = systems[key]["points"]
        x = [p["size_bytes"] for p in pts]
        med = [p["median_us"] / 1e3 for p in pts]
        up = [(p["p99_us"] - p["median_us"]) / 1e3 for p in pts]
        sizes.update(x)
        ax.errorbar(x, med, yerr=[[0] * len(up), up], capsize=3, label=systems[key]["label"], **STYLE.get(key, {}))
    log_axes(ax, sorted(sizes))
    ax.set_xlabel("array size (MB = 10^6 bytes)")
    ax.set_ylabel("write delay, ms (median; bar up to p99; log scale)")
    ax.set_title(f"Write delay of a numpy array into shared memory, {report['date']} ({verdict(report, 0)})\n{machine_line(report)}", fontsize=11)
    ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_serialization(report, path):
    ser = report["serialization"]
    systems = ser["systems"]
    keys = [k for k in SER_ORDER if k in systems]
    fig, ax = plt.subplots(figsize=(10, 6))
    width = 0.4
    xs = range(len(keys))
    bars = []
    for offset, field, label, hatch in ((-width / 2, "ser_mbps", "serialize", ""), (width / 2, "de_mbps", "deserialize", "//")):
        vals = [systems[k][field] if not (k == "memcpy" and field == "de_mbps") else 0 for k in keys]
        b = ax.bar([x + offset for x in xs], vals, width, label=label, hatch=hatch,
                   color=[STYLE.get(k, {}).get("color", "tab:gray") for k in keys], edgecolor="black", linewidth=0.5)
        bars.append((b, vals))
    for b, vals in bars:
        for rect, v in zip(b, vals, strict=True):
            if v > 0:
                ax.annotate(f"{v:,.0f}", (rect.get_x() + rect.get_width() / 2, rect.get_height()), xytext=(0, 3),
                            textcoords="offset points", ha="center", fontsize=7, rotation=90)
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels([textwrap.fill(systems[k]["label"], 18) for k in keys], fontsize=8)
    ax.set_ylabel("throughput, MB/s (median; log scale)")
    top = max(max(v for v in vals if v > 0) for _, vals in bars)
    ax.set_ylim(top=top * 30)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(loc="upper right")
    ax.set_title(f"Serialize / deserialize a {size_label(ser['size_bytes'])} float32 array, {report['date']} ({verdict(report, 1)})\n"
                 f"{machine_line(report)}; plain bars serialize, hatched deserialize", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_deserialization(report, path):
    systems = report["deserialization_scaling"]["systems"]
    fig, ax = plt.subplots(figsize=(9, 6))
    sizes = set()
    for key in [k for k in SER_ORDER if k in systems]:
        pts = systems[key]["points"]
        x = [p["size_bytes"] for p in pts]
        med = [p["median_us"] for p in pts]
        up = [p["p99_us"] - p["median_us"] for p in pts]
        sizes.update(x)
        ax.errorbar(x, med, yerr=[[0] * len(up), up], capsize=3, label=systems[key]["label"], **STYLE.get(key, {}))
    log_axes(ax, sorted(sizes))
    ax.set_xlabel("array size (MB = 10^6 bytes)")
    ax.set_ylabel("deserialization time, µs (median; bar up to p99; log scale)")
    ax.set_title(f"Deserialization time by array size: flat = O(1), {report['date']} ({verdict(report, 2)})\n{machine_line(report)}; cold caches before each decode", fontsize=11)
    ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def figures(report, stem):
    """The figures the report holds data for, as (plot, path) pairs."""
    outputs = []
    if report.get("write_delay", {}).get("systems"):
        outputs.append((plot_write_delay, Path(f"{stem}-write-delay.png")))
    if report.get("serialization", {}).get("systems"):
        outputs.append((plot_serialization, Path(f"{stem}-serialization.png")))
    if report.get("deserialization_scaling", {}).get("systems"):
        outputs.append((plot_deserialization, Path(f"{stem}-deserialization.png")))
    if not outputs:
        sys.exit(f"bench/python/plot.py: {stem}.json holds no figures to plot")
    return outputs


if __name__ == "__main__":
    # bench/common/plotting.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
    import plotting

    plotting.main("bench/python/plot.py", __doc__.splitlines()[0], "python", figures)

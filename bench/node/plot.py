#!/usr/bin/env python3
"""Draws the figures of one node-bench run.

Reads a node-DATE.json written by `node-bench` and writes, next to it:

- node-DATE-small.png: small-message latency against payload size, log-log,
  one-way and round trip (p50): hprm-node federates, decentralized and
  centralized, beside the raw socket floors of the same run (TCP and Unix
  socket ping-pong between two processes, blocking and polling reads), and,
  among the round trips, a message through a real hprm-rti and back.
- node-DATE-broadcast.png: broadcast-and-gather latency (p50, p99 as
  markers) against payload size, log-log, echo and fresh replies, both
  coordinations, with one memcpy of the payload and the 3x-memcpy target.
- node-DATE-rate.png: sustained messages per second, hprm vs the floors.

A workload the run skipped gets no figure. Usage: bench/node/plot.py bench/results/node-DATE.json
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
    load = m.get("loadavg_start") or "?"
    return f"{cpu}, {nproc} CPUs, load {load} at start; {report['plan']['mode']} run"


def plot_small(report, path):
    rows = report["small"]
    floors = report["floors"]["ping_pong"]
    sizes = sorted({r["size"] for r in rows} | {f["size"] for f in floors})
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.8), sharey=True)
    for ax, key, title in [(axes[0], "one_way", "one-way p50"), (axes[1], "rtt", "round trip p50")]:
        for coord, style, color in [("decentralized", "o-", "tab:blue"), ("decentralized_unix", "D-", "tab:purple"), ("centralized", "s-", "tab:red"), ("centralized_unix", "P-", "tab:orange")]:
            pts = [(r["size"], r[key]["median_us"]) for r in rows if r["coordination"] == coord and r.get(key)]
            if pts:
                name = {
                    "decentralized_unix": "decentralized, Unix-socket peers",
                    "decentralized": "decentralized, TCP peers",
                    "centralized": "centralized, TCP to the RTI",
                    "centralized_unix": "centralized, Unix socket to the RTI",
                }[coord]
                ax.plot(*zip(*sorted(pts)), style, color=color, label=f"hprm {name}", linewidth=2)
        for transport, polling, style, color in [
            ("tcp", False, "^--", "tab:gray"),
            ("uds", False, "v--", "tab:green"),
            ("tcp", True, "^:", "black"),
            ("uds", True, "v:", "tab:olive"),
        ]:
            pts = [(f["size"], f[key]["median_us"]) for f in floors if f["transport"] == transport and f["polling"] == polling]
            if pts:
                name = {"tcp": "TCP", "uds": "Unix socket"}[transport]
                ax.plot(*zip(*sorted(pts)), style, color=color, alpha=0.8, label=f"{name} floor, {'polling' if polling else 'blocking'}")
        if key == "rtt":
            for transport, polling, style, color in [("tcp", False, "x-.", "tab:brown"), ("uds", False, "+-.", "tab:pink")]:
                pts = [(r["size"], r["rtt"]["median_us"]) for r in report["floors"].get("rti_round_trip", []) if r["transport"] == transport and r["polling"] == polling]
                if pts:
                    name = {"tcp": "TCP", "uds": "Unix socket"}[transport]
                    ax.plot(*zip(*sorted(pts)), style, color=color, alpha=0.8, label=f"RTI round trip, {name}, blocking")
        size_axis(ax, sizes, "payload size")
        ax.set_title(title)
    axes[0].set_ylabel("µs (log scale)")
    axes[1].legend(fontsize=8)
    fig.suptitle(f"hprm-node small messages: ping-pong between two federates, {report['date']}\n{machine_line(report)}", fontsize=11)
    save(fig, path)


def plot_broadcast(report, path):
    rows = [r for r in report["broadcast"] if r.get("latency")]
    memcpy = report["floors"]["memcpy"]
    sizes = sorted({m["size"] for m in memcpy})
    fig, ax = plt.subplots(figsize=(9.5, 6.2))
    series = [
        ("echo", "decentralized", "o-", "tab:blue"),
        ("echo", "centralized", "s-", "tab:cyan"),
        ("fresh", "decentralized", "o-", "tab:red"),
        ("fresh", "centralized", "s-", "tab:orange"),
    ]
    for variant, coord, style, color in series:
        pts = sorted((r["size"], r["latency"]["median_us"], r["latency"]["p99_us"]) for r in rows if r["variant"] == variant and r["coordination"] == coord)
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ax.plot(xs, [p[1] for p in pts], style, color=color, label=f"hprm {variant}, {coord} (p50)", linewidth=2)
        ax.plot(xs, [p[2] for p in pts], "_", color=color, markersize=12, alpha=0.7)
    mx = [m["size"] for m in memcpy]
    my = [m["memcpy"]["median_us"] for m in memcpy]
    ax.plot(mx, my, "kD--", markersize=4, label="one memcpy of the payload (floor)")
    target = 3.0
    ax.plot(mx, [target * y for y in my], "k.:", alpha=0.6, label=f"{target:g}x memcpy (target at 50 MB)")
    size_axis(ax, sizes, "payload size (KB = 10^3 bytes, MB = 10^6 bytes)")
    ax.set_ylabel("source send -> last of 4 replies, µs (log scale); bars: p99")
    verdict = next((t for t in report.get("targets", []) if t["name"] == "broadcast" and t["pass"] is not None), None)
    extra = f"; 50 MB target: {'PASS' if verdict['pass'] else 'MISS'}" if verdict else ""
    ax.set_title(f"hprm-node broadcast to 4 receivers and gather, {report['date']}{extra}\n{machine_line(report)}", fontsize=11)
    ax.legend(fontsize=8)
    save(fig, path)


def plot_rate(report, path):
    rows = [r for r in report["rate"] if not r.get("error")]
    fig, ax = plt.subplots(figsize=(8, 4.8))
    colors = ["tab:gray" if "floor" in r["path"] else "tab:blue" for r in rows]
    bars = ax.bar([r["path"] for r in rows], [r["msgs_per_s"] for r in rows], color=colors)
    for bar, r in zip(bars, rows):
        ax.annotate(f"{r['msgs_per_s']:,.0f}/s", (bar.get_x() + bar.get_width() / 2, bar.get_height()), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=9)
    ax.set_ylabel("messages per second at the receiver")
    ax.set_title(f"Sustained rate, {report['setup']['rate_payload_bytes']}-byte messages, {report['date']}\n{machine_line(report)}", fontsize=11)
    ax.set_ylim(0, max(r["msgs_per_s"] for r in rows) * 1.15)
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, path)


def figures(report, stem):
    """The figures of the workloads the run measured."""
    outputs = []
    if any(r.get("one_way") for r in report.get("small", [])):
        outputs.append((plot_small, Path(f"{stem}-small.png")))
    if any(r.get("latency") for r in report.get("broadcast", [])):
        outputs.append((plot_broadcast, Path(f"{stem}-broadcast.png")))
    if any(not r.get("error") for r in report.get("rate", [])):
        outputs.append((plot_rate, Path(f"{stem}-rate.png")))
    return outputs


if __name__ == "__main__":
    plot_main("bench/node/plot.py", __doc__.splitlines()[0], "node", figures)

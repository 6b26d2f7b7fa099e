"""What the benchmark plot scripts (bench/node/plot.py, bench/store/plot.py,
bench/python/plot.py) and the suites' figures (bench/suite/suite.py,
bench/pipeline/run.py, bench/ros2/run.py) share.

Imports matplotlib with the file-only Agg backend (no display on build
machines), and provides the size labels and log-log size axes of their
figures, how a figure is saved, and the command line that reads one
DATE.json and writes its figures next to it.
"""

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on build machines
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib.ticker import FuncFormatter  # noqa: E402

__all__ = ["plt", "size_label", "size_axis", "save", "main"]


def size_label(n):
    """A byte size as the benchmarks' reports print it (hprm_bench::report::size_label):
    KB = 10^3 and MB = 10^6 bytes where the size is a round number of them, KiB for
    other multiples of 1024."""
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000} MB"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000} KB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


def size_axis(ax, sizes, label):
    """Log-log axes with a tick at each size, labelled by size_label, and a grid."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: size_label(int(round(v)))))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    # Sizes such as 5, 10, 25 and 50 MB sit close together on a log axis.
    plt.setp(ax.get_xticklabels(), rotation=45, ha="right")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xlabel(label)
    ax.grid(True, which="both", alpha=0.3)


def save(fig, path):
    """Lays the figure out, writes it as a PNG and frees it."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(script, description, bench, figures):
    """Command line of a plot script: reads the BENCH-DATE.json it is given and
    draws each (plot, path) that figures(report, stem) returns, stem being the
    JSON's path without .json; plot(report, path) writes one figure."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("json", type=Path, help=f"a {bench}-DATE.json written by {bench}-bench")
    args = parser.parse_args()
    try:
        report = json.loads(args.json.read_text())
    except (OSError, ValueError) as e:
        sys.exit(f"{script}: cannot read {args.json}: {e}")
    stem = args.json.with_suffix("")  # .../BENCH-DATE
    for plot, path in figures(report, stem):
        plot(report, path)
        print(f"wrote {path}")

"""The soak's verdict (soak.judge) on series whose answer is known: the one-minute CI run's store
level that a busier machine deepened mid-run (it failed CI once as a leak), a real leak of 10 MB
messages, a steady RSS, and a small steady fd leak."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import soak  # noqa: E402

MIB = 1 << 20


def verdict(figure, values, interval=2.0, warmup=20.0):
    rows = [(warmup + i * interval, "p", "proc", figure, v) for i, v in enumerate(values)]
    (v,) = soak.judge(rows, warmup, 0.05)
    return v


def test_a_queue_level_that_deepened_mid_run_is_not_a_leak():
    # The store's bytes in use in CI's one-minute run (MiB, a sample every 2 s after warm-up):
    # 10 MB messages in flight, more of them once the machine got busier; back to 0 at the end.
    level = [63.4, 72.9, 72.9, 72.9, 72.9, 53.9, 72.9, 73.3, 72.9, 75.0,
             75.0, 101.5, 101.5, 101.6, 101.5, 103.7, 72.9, 92.0, 101.5, 63.4]
    v = verdict("store_bytes", [x * MIB for x in level])
    assert not v["grows"], v


def test_messages_that_are_never_freed_grow():
    # The same level, plus one 10 MB message kept every second sample.
    base = [63.4, 72.9, 72.9, 72.9, 72.9, 53.9, 72.9, 73.3, 72.9, 75.0,
            75.0, 101.5, 101.5, 101.6, 101.5, 103.7, 72.9, 92.0, 101.5, 63.4]
    leaked = [(x + 10 * (i // 2)) * MIB for i, x in enumerate(base)]
    assert verdict("store_bytes", leaked)["grows"]


def test_a_steady_figure_and_a_small_steady_leak():
    assert not verdict("anon_bytes", [179 * MIB] * 20)["grows"]
    # One fd every 4 s: 10 over the window, with no scatter to hide it.
    assert verdict("fds", [85 + i // 2 for i in range(20)])["grows"]

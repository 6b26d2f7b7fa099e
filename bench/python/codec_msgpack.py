#!/usr/bin/env python3
"""The Python codec on a MessagePack-heavy value: encode and decode of a
3.9 KB dict of about 700 scalars, strings and lists, all in-band (no store
object), beside pickle protocol 5 of the same value in the same run.

What it is for: the serializer's own cost per MessagePack value, which the
5 MB array of pybench.py hides. To compare two builds, install each build's
extension in turn and run this with the same arguments (alternating).

Usage: python bench/python/codec_msgpack.py [--rounds 15] [--calls 2000]
Prints one line per codec: the best and the median of the rounds, in µs
per call.
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pybench import find_hprm_store, hprm_codec, start_hprm_store  # noqa: E402

VALUE = {
    "frame": 7,
    "boxes": [[1.5, 2.5, 3.5, 4.5, 0.9, 7] for _ in range(50)],
    "names": ["car", "person", "bike"] * 20,
    "meta": {str(k): k * 1_000_003 for k in range(100)},
    "neg": [-k for k in range(200)],
    "flag": True,
    "none": None,
}


def per_call_us(f, calls: int, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.perf_counter_ns()
        for _ in range(calls):
            f()
        out.append((time.perf_counter_ns() - t) / calls / 1000)
    return out


def line(name: str, samples: list[float]) -> str:
    return f"{name:<16} best {min(samples):7.2f} µs  median {statistics.median(samples):7.2f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hprm-msgpack-") as d:
        store = start_hprm_store(find_hprm_store(), Path(d), memory="64m")
        try:
            codec = hprm_codec(store.socket)
            data = codec.encode(VALUE, deliveries=1)
            assert codec.decode(data) == VALUE
            pickled = pickle.dumps(VALUE, protocol=5)
            print(f"value: {len(data)} bytes as HPRM MessagePack, {len(pickled)} as pickle 5")
            print(line("hprm encode", per_call_us(lambda: codec.encode(VALUE, deliveries=1), args.calls, args.rounds)))
            print(line("hprm decode", per_call_us(lambda: codec.decode(data), args.calls, args.rounds)))
            print(line("pickle-5 dumps", per_call_us(lambda: pickle.dumps(VALUE, protocol=5), args.calls, args.rounds)))
            print(line("pickle-5 loads", per_call_us(lambda: pickle.loads(pickled), args.calls, args.rounds)))
        finally:
            store.stop()


if __name__ == "__main__":
    main()

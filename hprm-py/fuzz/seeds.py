"""Writes the first inputs of the py_payload fuzz target
(hprm-py/fuzz/seeds/): the values of the codec's tests (test_codec.py)
encoded by the Python codec with no store (every buffer inline), and the
Rust encoder's payloads (fuzz/corpus/payload/ of the root: what a Rust
sender writes). Run with a Python that has hprm and numpy:

    python hprm-py/fuzz/seeds.py hprm-py/fuzz/seeds
"""

import collections
import decimal
import shutil
import sys
from pathlib import Path

import numpy as np

from hprm import _native

HERE = Path(__file__).resolve().parent
Point = collections.namedtuple("Point", "x y")


def values():
    yield from [None, True, 0, -1, 255, -129, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, float("nan"), "", "héllo ✓",
                "z" * 40, b"", b"\x00\xff", b"b" * 300]
    yield [1, [2, [3, [4]]], {"a": {"b": None}}]
    yield (1, "two", 3.0)
    yield {"s": 1, 2: "i", b"b": 3, True: 4, 1.5: 5, None: 6}
    yield {(1, 2): "tuple key"}
    yield from [2**64, 10**40, {1, 2}, frozenset("ab"), 1 + 2j, decimal.Decimal("1.1"), Point(1, 2), range(3)]
    for dtype in ["?", "i1", "u1", "<i2", ">i4", "<u8", "<f2", "<f4", ">f8", "<c8", "<c16", "<M8[ns]", "<m8[s]",
                  "S3", "<U2", "V4"]:
        yield np.zeros(6, dtype=dtype)
    yield np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    yield np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    yield np.array(7.5)
    yield np.zeros((0, 3))
    yield np.zeros(3, dtype=[("x", "<f4"), ("n", "<i2")])
    yield {"image": np.ones((4, 4, 3), dtype=np.uint8), "stamp": 42, "name": "camera"}


def main(out: Path):
    out.mkdir(parents=True, exist_ok=True)
    codec = _native.Codec(None, threshold=1 << 40)
    for i, value in enumerate(values()):
        (out / f"python-{i:02}").write_bytes(codec.encode(value))
    rust = HERE.parent.parent / "fuzz" / "corpus" / "payload"
    for path in sorted(rust.iterdir()):
        shutil.copy(path, out / f"rust-{path.name}")
    print(f"seeds written to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "seeds")

#!/usr/bin/env python3
"""Python benchmarks of HPRM against its peers, side by side in one run
(workloads 1 and 2 of BENCHMARKS.md).

1. Write delay: the time a producer takes to put a numpy array of 1-50 MB
   into shared memory so that another process can read it. HPRM
   (`Codec.encode(array, deliveries=1)`: create the store object, copy,
   seal) vs Plasma (pyarrow 11: `client.put`, and create + copy + seal) vs
   `multiprocessing.shared_memory` (create a segment + copy; its name is
   what travels). Timed in the producer; after every write a reader process
   takes what was written (and, once per size per system, checks every byte
   with a CRC), so each system runs as it would in a real hand-over.
2. Serialization of a 5 MB float32 array: serialize + deserialize with
   HPRM's adaptive codec (the array goes to the store, the decode is a
   zero-copy view), pickle protocol 5 in-band, pickle 5 with out-of-band
   buffers (kept as PickleBuffers: no copy), and a ROS 2 message through
   rclpy (numpy -> std_msgs/Float32MultiArray -> serialize_message ->
   deserialize_message -> numpy). Plus deserialization time at 1, 5 and
   50 MB, to show which decoders are O(1) in the array size.

Usage (bench/python/run.sh sets up the venv and calls this, then plots):

    python bench/python/pybench.py [--quick|--full] [--out DIR] [--skip plasma,rclpy,...]

Writes DIR/python-DATE.json and DIR/python-DATE.md (DATE in UTC). A
baseline that cannot be imported or fails is reported as skipped, with the
reason, and the run goes on; a failure of HPRM itself fails the run.

The functions here are also what bench/python/test_smoke.py runs, with tiny
sizes and one round, so that the harness cannot rot unnoticed.
"""

from __future__ import annotations

import argparse
import array
import datetime as dt
import gc
import importlib.metadata
import math
import multiprocessing.connection
import os
import pickle
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MB = 1_000_000  # sizes and throughputs in SI units, as the other benchmarks

WRITE_SIZES = [1 * MB, 5 * MB, 10 * MB, 25 * MB, 50 * MB]
SER_SIZE = 5 * MB
DESER_SIZES = [1 * MB, 5 * MB, 50 * MB]

# Rounds per point. The slow rclpy variant (msg.data = ndarray: the setter
# checks every element in Python) takes a quarter of a second per 5 MB, so
# it gets fewer.
PLANS = {
    "quick": dict(warmup=3, rounds=10, ser_warmup=5, ser_rounds=40, slow_rounds=2, scaling_warmup=2, scaling_rounds=6),
    "full": dict(warmup=10, rounds=100, ser_warmup=20, ser_rounds=500, slow_rounds=7, scaling_warmup=5, scaling_rounds=80),
}

STORE_MEMORY = "1G"
PLASMA_MEMORY = 1_000_000_000
START_WITHIN = 30.0  # seconds a daemon may take to accept connections (busy machine)
# Twice the last-level cache of this machine's CPU (32 MiB): memory read or
# written in turn over this much is not in the caches (see scrub_caches).
SCRUB_BYTES = 64 * 2**20

BASELINES = ("plasma", "shm", "pickle", "rclpy")


class BenchError(Exception):
    """A failure of the harness or of HPRM: the run cannot go on."""


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------
# Statistics


def summarize(samples_ns: list[int]) -> dict:
    """Median, p99 (nearest rank), mean, min, max in µs, and the samples."""
    if not samples_ns:
        raise ValueError("no samples")
    us = sorted(s / 1e3 for s in samples_ns)
    n = len(us)
    mid = n // 2
    median = us[mid] if n % 2 else (us[mid - 1] + us[mid]) / 2
    p99 = us[max(0, math.ceil(0.99 * n) - 1)]
    return {
        "n": n,
        "median_us": round(median, 2),
        "p99_us": round(p99, 2),
        "mean_us": round(sum(us) / n, 2),
        "min_us": round(us[0], 2),
        "max_us": round(us[-1], 2),
        "samples_us": [round(s / 1e3, 2) for s in samples_ns],
    }


def size_text(n: int) -> str:
    return f"{n / MB:g} MB" if n >= MB else f"{n / 1000:g} KB"


def throughput_mbps(nbytes: int, us: float) -> float:
    return nbytes / MB / (us / 1e6) if us > 0 else float("inf")


# ---------------------------------------------------------------------------
# Finding and running the daemons


def find_hprm_store(explicit: str | None = None) -> Path:
    """hprm-store: --store-bin, $HPRM_BIN_DIR, this venv's bin/ (where
    hprm-py/install.sh puts the one matching the installed wheel), the
    workspace's target/release, then PATH."""
    if explicit:
        p = Path(explicit)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise BenchError(f"--store-bin {p} is not an executable file")
        return p
    dirs = []
    if os.environ.get("HPRM_BIN_DIR"):
        dirs.append(Path(os.environ["HPRM_BIN_DIR"]))
    dirs += [Path(sys.prefix) / "bin", ROOT / "target" / "release"]
    for d in dirs:
        if (d / "hprm-store").is_file() and os.access(d / "hprm-store", os.X_OK):
            return d / "hprm-store"
    found = shutil.which("hprm-store")
    if found:
        return Path(found)
    raise BenchError(
        "hprm-store not found in $HPRM_BIN_DIR, the venv's bin/, target/release or PATH; "
        "install the SDK with `hprm-py/install.sh VENV` (it puts the daemon in VENV/bin) "
        "or build it with `cargo build --release -p hprm-store`"
    )


class Daemon:
    """A daemon started by the benchmark on a Unix socket; stopped by stop()."""

    def __init__(self, name: str, argv: list[str], sock: str, log_path: Path):
        self.name = name
        self.socket = sock
        self.log_path = log_path
        self._log = open(log_path, "wb")
        try:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        except OSError as e:
            self._log.close()
            raise BenchError(f"cannot start {name} ({argv[0]}): {e}") from e
        deadline = time.monotonic() + START_WITHIN
        while True:
            if self.process.poll() is not None:
                self.stop()
                raise BenchError(f"{name} exited during start (code {self.process.returncode}):\n{self.log()}")
            # A bare connect is enough to know that the socket is served.
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(sock)
                    return
                except OSError:
                    pass
            if time.monotonic() > deadline:
                self.stop()
                raise BenchError(f"{name} did not accept connections on {sock} within {START_WITHIN:.0f} s:\n{self.log()}")
            time.sleep(0.02)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 5 s; the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


def start_hprm_store(binary: Path, directory: Path, memory: str = STORE_MEMORY) -> Daemon:
    # As the brief and the launcher run it: no --populate, so a producer's
    # mapping faults its pages in on first touch (see prime_codec).
    sock = str(directory / "hprm-store.sock")
    return Daemon("hprm-store", [str(binary), "--socket", sock, "--memory", memory], sock, directory / "hprm-store.log")


def plasma_store_binary() -> Path | None:
    """The plasma_store executable that the pyarrow 11 wheel ships."""
    candidates = [Path(sys.prefix) / "bin" / "plasma_store"]
    try:
        import pyarrow

        candidates.append(Path(pyarrow.__file__).parent / "plasma-store-server")
    except ImportError:
        pass
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    found = shutil.which("plasma_store")
    return Path(found) if found else None


def start_plasma_store(directory: Path, memory: int = PLASMA_MEMORY) -> Daemon:
    binary = plasma_store_binary()
    if binary is None:
        raise BenchError("the plasma_store executable of the pyarrow 11 wheel was not found")
    sock = str(directory / "plasma.sock")
    return Daemon("plasma_store", [str(binary), "-m", str(memory), "-s", sock], sock, directory / "plasma.log")


# ---------------------------------------------------------------------------
# Which baselines can run


def import_plasma():
    # Plasma was deprecated in Arrow 10 and removed in 12: only pyarrow 11
    # has it. It says so on every use, and put() warns that the
    # pyarrow.serialize it uses is deprecated: known, and noise here.
    warnings.filterwarnings("ignore", message=".*[Pp]lasma is deprecated.*")
    warnings.filterwarnings("ignore", message=".*pyarrow.serialize.*")
    warnings.filterwarnings("ignore", message=".*pyarrow.deserialize.*")
    import pyarrow.plasma as plasma  # noqa: PLC0415

    return plasma


def import_rclpy():
    from rclpy.serialization import deserialize_message, serialize_message  # noqa: PLC0415
    from std_msgs.msg import Float32MultiArray, MultiArrayDimension  # noqa: PLC0415

    return serialize_message, deserialize_message, Float32MultiArray, MultiArrayDimension


def available_baselines(skip=()) -> tuple[set[str], dict[str, str]]:
    """The baselines that can run here, and a reason for each that cannot."""
    ok, skipped = set(), {}
    for name in BASELINES:
        if name in skip:
            skipped[name] = "skipped on request (--skip)"
            continue
        if name == "plasma":
            try:
                import_plasma()
            except Exception as e:  # ImportError, or a binary mismatch with numpy
                skipped[name] = (f"pyarrow.plasma cannot be imported ({type(e).__name__}: {e}); it needs "
                                 "pyarrow==11.0.0 (the last release with Plasma; cp311 wheels) and numpy<2")
                continue
            if plasma_store_binary() is None:
                skipped[name] = "pyarrow.plasma imports but the plasma_store executable of its wheel is missing"
                continue
        elif name == "rclpy":
            try:
                import_rclpy()
            except Exception as e:
                skipped[name] = (f"rclpy cannot be imported ({type(e).__name__}: {e}); install ROS 2 from PyPI: "
                                 "pip install ros-rclpy ros-rmw-fastrtps-cpp ros-std-msgs ros-sensor-msgs (Python 3.11)")
                continue
        ok.add(name)
    return ok, skipped


# ---------------------------------------------------------------------------
# HPRM codec helpers


def hprm_codec(sock: str):
    from hprm import _native  # noqa: PLC0415

    codec = _native.Codec(sock)
    codec.store_stats()  # connects now (connection and mapping are lazy), not in a timed call
    return codec


def prime_codec(codec, chunk: int = 10 * MB) -> float:
    """Writes (and releases) as many bytes as the store's arena holds, once.

    The store keeps released objects until it needs the room, so successive
    objects walk through the whole arena, and each page is faulted into the
    producer's mapping the first time it is written (about 2 µs a page here:
    15 ms for 25 MB). A producer that has run for a while has met every
    page; a fresh one has not. Measuring after one pass gives the steady
    state of a running program, as Plasma's steady state (it reuses the same
    freed block) is measured; the cold case is measured separately
    ("HPRM, fresh connection"), and `hprm-store --populate` pre-faults the
    arena at connect instead. Returns the seconds it took."""
    arena = int(codec.store_stats()["arena_size"])
    chunk = max(64 * 1024, min(chunk, arena // 8))
    block = np.ones(chunk // 4, np.float32)
    t = time.perf_counter()
    written = 0
    while written < arena + 2 * chunk:
        view = codec.decode(codec.encode(block, 1))
        del view  # releases the delivery: the object becomes evictable
        written += chunk
    return time.perf_counter() - t


# ---------------------------------------------------------------------------
# The reader process of workload 1


def reader_main(conn, hprm_socket, plasma_socket):
    """Runs in another process: takes what the producer wrote, by the handle
    that travels for each system, and answers ("ok", crc32 or None) or
    ("error", text). The CRC covers every byte, computed when asked."""
    codec = hprm_codec(hprm_socket) if hprm_socket else None
    pclient = None
    if plasma_socket:
        plasma = import_plasma()
        pclient = plasma.connect(plasma_socket)
    from multiprocessing import resource_tracker, shared_memory  # noqa: PLC0415

    conn.send(("ready", os.getpid()))
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            break
        kind, form, check = msg
        try:
            crc = None
            if kind == "hprm":
                value = codec.decode(form)
                if check:
                    crc = zlib.crc32(value)
                del value
            elif kind in ("plasma_put", "plasma_create"):
                oid = plasma.ObjectID(form)
                if kind == "plasma_put":
                    [value] = pclient.get([oid], timeout_ms=10_000)
                else:
                    [value] = pclient.get_buffers([oid], timeout_ms=10_000)
                if value is None or (kind == "plasma_put" and value is plasma.ObjectNotAvailable):
                    raise RuntimeError(f"plasma object {form.hex()} not available")
                if check:
                    crc = zlib.crc32(value)
                del value
            elif kind == "shm":
                name, nbytes = form
                seg = shared_memory.SharedMemory(name=name)
                # Before Python 3.13 attaching registers the segment with
                # this process's resource tracker, which would unlink it
                # (and warn) when this process exits: the producer owns it.
                resource_tracker.unregister(seg._name, "shared_memory")
                if check:
                    view = seg.buf[:nbytes]  # the segment may be rounded up to whole pages
                    crc = zlib.crc32(view)
                    view.release()
                seg.close()
            else:
                raise ValueError(f"unknown kind {kind!r}")
            conn.send(("ok", crc))
        except Exception as e:  # report to the producer, keep serving
            conn.send(("error", f"{type(e).__name__}: {e}"))


class Reader:
    """The reader process: a fresh interpreter running this file with
    --reader, as a real consumer would be, talking over a socket pair.
    (Not multiprocessing's spawn: that re-runs the parent's __main__, which
    breaks when the harness is driven from another script.)"""

    def __init__(self, hprm_socket=None, plasma_socket=None):
        ours, theirs = socket.socketpair()
        argv = [sys.executable, str(Path(__file__).resolve()), "--reader", str(theirs.fileno())]
        if hprm_socket:
            argv += ["--hprm-socket", hprm_socket]
        if plasma_socket:
            argv += ["--plasma-socket", plasma_socket]
        try:
            self.process = subprocess.Popen(argv, pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.conn = multiprocessing.connection.Connection(ours.detach())
        if not self.conn.poll(START_WITHIN * 2):
            self.close()
            raise BenchError("the reader process did not start within a minute")
        try:
            tag, self.pid = self.conn.recv()
        except EOFError:
            self.close()
            raise BenchError(f"the reader process died during start (exit code {self.process.poll()}); see its traceback above") from None
        assert tag == "ready"

    def read(self, kind, form, check=False):
        self.conn.send((kind, form, check))
        if not self.conn.poll(60):
            raise BenchError(f"the reader did not answer within 60 s ({kind})")
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"the reader could not read the {kind} object: {value}")
        return value

    def close(self):
        try:
            if self.process.poll() is None:
                self.conn.send(("stop",))
        except OSError:
            pass
        self.conn.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ---------------------------------------------------------------------------
# Workload 1: the systems that write


class WriteSystem:
    """One way to make an array readable by another process.

    prepare(arr) -> ctx          untimed set-up of one round (an id, a connection)
    write(ctx, arr) -> h         THE TIMED PART: the array is readable when it returns
    form(ctx, h, nbytes)         what travels to the reader (payload, id, name)
    cleanup(ctx, h)              untimed, after the reader answered
    """

    key = ""
    label = ""
    reader_kind: str | None = None  # None: nothing to read (the memcpy floor)
    # Optional: {part name: [ns, ...]} that write() fills with the times of
    # its steps, reported as medians next to the total.
    parts: dict | None = None

    def prepare(self, arr):
        return None

    def form(self, ctx, handle, nbytes):
        return handle

    def cleanup(self, ctx, handle):
        pass


class HprmWrite(WriteSystem):
    key, label, reader_kind = "hprm", "HPRM store", "hprm"

    def __init__(self, codec):
        self.codec = codec

    def write(self, ctx, arr):
        # Creates the object (announcing one delivery), copies, seals; the
        # small payload is what travels.
        return self.codec.encode(arr, 1)


class HprmRoundTrip(WriteSystem):
    """Not a write: one request to the store (stats) in the same conditions,
    so the report can say how much of a small write is the round trip (the
    daemon sleeps between writes here, and waking it is most of it)."""

    key, label, reader_kind = "hprm_rt", "HPRM store round trip (a stats request)", None

    def __init__(self, codec):
        self.codec = codec

    def write(self, ctx, arr):
        self.codec.store_stats()


class HprmColdWrite(WriteSystem):
    """The first write through a fresh connection: every page the object
    lands on is faulted into this process's mapping during the copy."""

    key, label, reader_kind = "hprm_cold", "HPRM, fresh connection", "hprm"

    def __init__(self, sock):
        self.sock = sock

    def prepare(self, arr):
        return hprm_codec(self.sock)

    def write(self, ctx, arr):
        return ctx.encode(arr, 1)


class PlasmaPut(WriteSystem):
    key, label, reader_kind = "plasma_put", "Plasma put", "plasma_put"

    def __init__(self, plasma, client):
        self.plasma, self.client = plasma, client

    def prepare(self, arr):
        return self.plasma.ObjectID(os.urandom(20))

    def write(self, oid, arr):
        # pyarrow serialization, then create + copy (6 threads, Plasma's
        # default) + seal + release.
        self.client.put(arr, oid)
        return oid

    def form(self, oid, handle, nbytes):
        return oid.binary()

    def cleanup(self, oid, handle):
        self.client.delete([oid])


class PlasmaCreate(WriteSystem):
    key, label, reader_kind = "plasma_create", "Plasma create+copy+seal", "plasma_create"

    def prepare(self, arr):
        return self.plasma.ObjectID(os.urandom(20))

    def __init__(self, plasma, client):
        self.plasma, self.client = plasma, client
        # Timed apart: Plasma's seal hashes the whole object (XXH64, in
        # PlasmaClient::Seal), a cost that grows with the size.
        self.parts = {"create": [], "copy": [], "seal": []}

    def write(self, oid, arr):
        t0 = time.perf_counter_ns()
        buf = self.client.create(oid, arr.nbytes)
        t1 = time.perf_counter_ns()
        np.copyto(np.frombuffer(buf, dtype=arr.dtype).reshape(arr.shape), arr)
        t2 = time.perf_counter_ns()
        self.client.seal(oid)
        t3 = time.perf_counter_ns()
        self.parts["create"].append(t1 - t0)
        self.parts["copy"].append(t2 - t1)
        self.parts["seal"].append(t3 - t2)
        # Kept here, not returned: cleanup must drop the last reference
        # (which releases the object) before deleting it.
        self.buf = buf

    def form(self, oid, handle, nbytes):
        return oid.binary()

    def cleanup(self, oid, handle):
        self.buf = None  # releases the producer's reference
        self.client.delete([oid])


class ShmWrite(WriteSystem):
    key, label, reader_kind = "shm", "Python shared_memory", "shm"

    def __init__(self):
        from multiprocessing import shared_memory  # noqa: PLC0415

        self.shared_memory = shared_memory

    def write(self, ctx, arr):
        seg = self.shared_memory.SharedMemory(create=True, size=arr.nbytes)
        dst = np.ndarray(arr.shape, arr.dtype, buffer=seg.buf)
        np.copyto(dst, arr)
        del dst  # an exported view would keep close() from working
        return seg

    def form(self, ctx, seg, nbytes):
        return (seg.name, nbytes)  # the name travels

    def cleanup(self, ctx, seg):
        seg.close()
        seg.unlink()


class Destinations:
    """Private, already touched buffers for a floor copy, used in turn and
    together at least twice the last-level cache: like a store object, each
    copy lands in memory that is mapped but not in the caches, so the floor
    is what the memory system allows, not a copy between cached buffers."""

    def __init__(self):
        self.nbytes, self.bufs, self.next = None, [], 0

    def take(self, like):
        if self.nbytes != like.nbytes:
            self.bufs = []  # the old ones go first
            for _ in range(max(2, math.ceil(SCRUB_BYTES / like.nbytes))):
                b = np.empty_like(like)
                b.fill(0)  # fault its pages in now
                self.bufs.append(b)
            self.nbytes = like.nbytes
        self.next = (self.next + 1) % len(self.bufs)
        return self.bufs[self.next]


class MemcpyFloor(WriteSystem):
    """A copy into a private, touched buffer: what no shared-memory write can
    beat (nothing else to do, and no page to fault)."""

    key, label, reader_kind = "memcpy", "memcpy floor (private buffer)", None

    def __init__(self):
        self.dst = Destinations()

    def prepare(self, arr):
        return self.dst.take(arr)

    def write(self, dst, arr):
        np.copyto(dst, arr)


def write_round(system, arr, reader, check=False):
    """One write: timed in the producer, then read by the reader process.
    Returns (nanoseconds, crc32 from the reader or None)."""
    ctx = system.prepare(arr)
    t0 = time.perf_counter_ns()
    handle = system.write(ctx, arr)
    elapsed = time.perf_counter_ns() - t0
    crc = None
    try:
        if system.reader_kind is not None:
            crc = reader.read(system.reader_kind, system.form(ctx, handle, arr.nbytes), check)
    finally:
        system.cleanup(ctx, handle)
        del ctx, handle
    return elapsed, crc


def make_array(nbytes: int, seed: int = 1) -> np.ndarray:
    """A float32 array of nbytes (random: no page is shared or compressible)."""
    rng = np.random.default_rng(seed)
    return rng.random(nbytes // 4, dtype=np.float32)


def measure_write_delay(systems, sizes, warmup, rounds, reader, progress=log, failures=None):
    """Per size: one checked round per system (the reader CRCs every byte),
    `warmup` rounds, then `rounds` timed rounds, the systems interleaved
    round by round in a rotating order so that the machine's noise falls on
    all of them alike. A baseline that fails is dropped (its reason in
    `failures`); an HPRM failure raises.

    Returns {key: [{"size_bytes", "read_check", **summary}, ...]}."""
    failures = {} if failures is None else failures
    results = {s.key: [] for s in systems}
    live = list(systems)
    tty = sys.stderr.isatty()
    for size in sizes:
        arr = make_array(size, seed=size)
        want = zlib.crc32(arr)
        checks = {}
        for s in list(live):
            try:
                if s.reader_kind is None:
                    write_round(s, arr, reader)
                    checks[s.key] = {"ok": True, "detail": "private buffer: nothing to read"}
                    continue
                _, got = write_round(s, arr, reader, check=True)
                ok = got == want
                checks[s.key] = {"ok": ok, "detail": f"reader pid {reader.pid} (producer {os.getpid()}): crc32 {got:#010x}, expected {want:#010x}"}
                if not ok:
                    raise RuntimeError(f"the reader saw other bytes than were written ({checks[s.key]['detail']})")
            except Exception as e:
                drop(s, e, live, failures)
        samples = {s.key: [] for s in live}
        gc.collect()
        gc.disable()  # no collection pauses inside timed writes
        try:
            for r in range(warmup + rounds):
                if r == warmup:  # the parts of measured rounds only
                    for s in live:
                        if s.parts is not None:
                            s.parts = {k: [] for k in s.parts}
                order = live[r % len(live):] + live[: r % len(live)] if live else []
                for s in order:
                    if s not in live:
                        continue
                    try:
                        ns, _ = write_round(s, arr, reader)
                    except Exception as e:
                        drop(s, e, live, failures)
                        samples.pop(s.key, None)
                        continue
                    if r >= warmup:
                        samples[s.key].append(ns)
                if tty:  # a live counter; the summary line below replaces it
                    sys.stderr.write(f"\r    {size_text(size):>6}: round {r + 1}/{warmup + rounds}")
                    sys.stderr.flush()
        finally:
            gc.enable()
        if tty:
            sys.stderr.write("\r")
        parts = []
        for s in live:
            summary = summarize(samples[s.key])
            point = {"size_bytes": size, "read_check": checks.get(s.key), **summary}
            if s.parts:
                point["parts_median_us"] = {k: summarize(v)["median_us"] for k, v in s.parts.items() if v}
            results[s.key].append(point)
            parts.append(f"{s.label} {summary['median_us'] / 1e3:.2f}")
        progress(f"    {size_text(size):>6}, median ms: " + ", ".join(parts))
    return {k: v for k, v in results.items() if v and len(v) == len(sizes)}


def drop(system, error, live, failures):
    """Takes a failed system out of the run; HPRM's failures end the run."""
    if system.key.startswith("hprm"):
        raise BenchError(f"{system.label} failed: {type(error).__name__}: {error}") from error
    log(f"    !! {system.label} failed and is dropped from the run: {type(error).__name__}: {error}")
    failures[system.key] = f"failed during the run: {type(error).__name__}: {error}"
    if system in live:
        live.remove(system)


# ---------------------------------------------------------------------------
# Workload 2: serialization


class SerSystem:
    """ser(arr) -> blob and de(blob) -> array, both timed. Whatever they
    return is dropped before the next round."""

    key = ""
    label = ""
    scaling = True  # include in the deserialization-vs-size series
    slow = False  # few rounds (seconds per round)

    def setup(self, arr):
        pass

    def prepare_round(self, arr):
        """Untimed, before each serialization: what `ser` is given. A new
        array every round, as a producer computes one per message, so that
        every system's timed call starts as a real send does, right after
        the bytes were written, with the caches that leaves. (Handing back
        `arr` itself once favoured the systems that did: their input stayed
        where the last round left it, while a born array had just been
        written.)"""
        return arr.copy()

    def settle(self):
        """Untimed, between a serialization and the deserialization timed
        apart from it (the size-scaling series)."""

    def teardown(self):
        pass


class HprmSer(SerSystem):
    key, label = "hprm", "HPRM adaptive (Codec)"

    def __init__(self, codec):
        self.codec = codec

    def ser(self, arr):
        return self.codec.encode(arr, 1)  # the array goes to the store: one copy

    def de(self, blob):
        return self.codec.decode(blob)  # a read-only view of the store: no copy

    def settle(self):
        # One round trip, so that the timed decode meets the daemon in the
        # same state at every size. Without it the decode's request queues
        # behind the seal that ended the encode; after a copy long enough
        # for the daemon to have gone to sleep (tens of MB), it then pays
        # the daemon's wake-up (100-300 µs on this machine), which has
        # nothing to do with decoding but grows with the size of the copy
        # before it.
        self.codec.store_stats()


class HprmRelaySer(HprmSer):
    """Sending on an array that is already in the store (what a receiver
    that forwards what it got does): no copy at either end."""

    key, label, scaling = "hprm_relay", "HPRM, array already in the store (sent on)", False

    def setup(self, arr):
        self.held = self.codec.decode(self.codec.encode(arr, 1))

    def ser(self, arr):
        return self.codec.encode(self.held, 1)  # the same object, one more delivery

    def teardown(self):
        del self.held


class HprmAllocSer(HprmSer):
    """The producer makes its array in the store (Codec.alloc_array, what
    ctx.alloc_array does in a reaction) and fills it, untimed: that is the
    producer's own work, done in place of filling a private array. The
    encode then sends it by reference: no copy at either end."""

    key, label, scaling = "hprm_alloc", "HPRM, array made in the store (alloc_array)", False

    def prepare_round(self, arr):
        out = self.codec.alloc_array(arr.shape, arr.dtype, 1)
        np.copyto(out, arr)
        return out


class HprmBornSer(HprmSer):
    """The producer computes its array inside a reaction (here: a copy of
    the input, untimed, in a Codec.store_memory() scope, which every
    reaction runs in): numpy allocates it in the store, so the encode seals
    it and sends it by reference: no copy at either end."""

    key, label, scaling = "hprm_born", "HPRM, array computed in a reaction (born in the store)", False

    def prepare_round(self, arr):
        with self.codec.store_memory():
            return arr.copy()


class PickleInband(SerSystem):
    key, label = "pickle_inband", "pickle 5 in-band"

    def ser(self, arr):
        return pickle.dumps(arr, protocol=5)

    def de(self, blob):
        return pickle.loads(blob)


class PickleOutOfBand(SerSystem):
    key, label = "pickle_oob", "pickle 5 out-of-band"

    def ser(self, arr):
        buffers = []
        data = pickle.dumps(arr, protocol=5, buffer_callback=buffers.append)
        return data, buffers  # the buffers stay PickleBuffers over arr: no copy

    def de(self, blob):
        data, buffers = blob
        return pickle.loads(data, buffers=buffers)


class MemcpySer(SerSystem):
    """The floor of any serializer whose output another process can read:
    one copy of the bytes (into a private, touched buffer not in the
    caches). Its "deserialize" returns the copy."""

    key, label, scaling = "memcpy", "memcpy (floor of any copy)", False

    def __init__(self):
        self.dst = Destinations()

    def ser(self, arr):
        dst = self.dst.take(arr)
        np.copyto(dst, arr)
        return dst

    def de(self, blob):
        return blob


class RclpyFast(SerSystem):
    """numpy -> Float32MultiArray the fast way: array.array('f') filled from
    the array's bytes (one copy; the message's setter takes an array.array
    of the right type code as it is), serialize_message (CDR), and back:
    deserialize_message, np.frombuffer over the message's array.array."""

    key, label = "rclpy", "ROS 2 rclpy Float32MultiArray"

    def __init__(self):
        self.serialize, self.deserialize, self.msg_type, self.dim_type = import_rclpy()

    def message(self, arr):
        msg = self.msg_type()
        msg.layout.dim = [self.dim_type(label="x", size=arr.size, stride=arr.size)]
        data = array.array("f")
        data.frombytes(memoryview(arr).cast("B"))
        msg.data = data
        return msg

    def ser(self, arr):
        return self.serialize(self.message(arr))

    def de(self, blob):
        msg = self.deserialize(blob, self.msg_type)
        shape = [d.size for d in msg.layout.dim] or [-1]
        return np.frombuffer(msg.data, dtype=np.float32).reshape(shape)


class RclpyNaive(RclpyFast):
    """The obvious conversion, msg.data = ndarray: the generated setter
    checks and converts every element in Python."""

    key, label, scaling, slow = "rclpy_naive", "ROS 2 rclpy, msg.data = ndarray", False, True

    def message(self, arr):
        msg = self.msg_type()
        msg.layout.dim = [self.dim_type(label="x", size=arr.size, stride=arr.size)]
        msg.data = arr
        return msg


def check_round_trip(system, arr):
    """The value must come back equal (once, untimed)."""
    system.setup(arr)
    try:
        got = system.de(system.ser(system.prepare_round(arr)))
        if not (isinstance(got, np.ndarray) and got.dtype == arr.dtype and np.array_equal(got.reshape(arr.shape), arr)):
            raise RuntimeError(f"the round trip returned something else: {type(got).__name__} {getattr(got, 'dtype', '')} {getattr(got, 'shape', '')}")
        del got
    finally:
        system.teardown()


def measure_serialization(systems, size, warmup, rounds, slow_rounds, progress=log, failures=None):
    """Serialize + deserialize one float32 array of `size` bytes; systems
    interleaved round by round. Returns {key: {"ser": summary, "de": ...}}."""
    failures = {} if failures is None else failures
    arr = make_array(size, seed=7)
    live = []
    for s in systems:
        try:
            check_round_trip(s, arr)
            live.append(s)
        except Exception as e:
            drop(s, e, live, failures)
    ser = {s.key: [] for s in live}
    de = {s.key: [] for s in live}
    for s in live:
        s.setup(arr)
    total = warmup + rounds
    # A slow variant runs every `step` rounds only (slow_rounds + 1 times,
    # spread over the run; its first run is its warm-up, if there is one).
    step = max(1, total // (slow_rounds + 1))
    runs = dict.fromkeys(ser, 0)
    gc.collect()
    gc.disable()
    try:
        for r in range(total):
            for s in live[r % len(live):] + live[: r % len(live)]:
                if s not in live or (s.slow and r % step != 0):
                    continue
                try:
                    x = s.prepare_round(arr)
                    t0 = time.perf_counter_ns()
                    blob = s.ser(x)
                    t1 = time.perf_counter_ns()
                    value = s.de(blob)
                    t2 = time.perf_counter_ns()
                    del value, blob, x
                except Exception as e:
                    s.teardown()
                    drop(s, e, live, failures)
                    continue
                runs[s.key] += 1
                if (r >= warmup) if not s.slow else (runs[s.key] > 1 or warmup == 0):
                    ser[s.key].append(t1 - t0)
                    de[s.key].append(t2 - t1)
    finally:
        gc.enable()
        for s in live:
            s.teardown()
    out = {}
    for s in live:
        out[s.key] = {"label": s.label, "ser": summarize(ser[s.key]), "de": summarize(de[s.key])}
        st, dt_ = out[s.key]["ser"]["median_us"], out[s.key]["de"]["median_us"]
        progress(f"    {s.label}: serialize {st:,.1f} µs, deserialize {dt_:,.1f} µs (median of {len(ser[s.key])})")
    return out


_scrub = None


def scrub_caches():
    """Reads SCRUB_BYTES of unrelated memory, so that every timed decode
    starts from the same cold caches whatever came before it. Without it a
    decode that copies nothing still looks slower after a larger
    serialization (measured here: HPRM and pickle-5 out-of-band alike took
    3-4x longer at 50 MB than at 1 MB, and the same with the caches
    scrubbed), because the copy that made the serialized form evicted the
    interpreter's and the client's own data from the caches. A receiver in
    another process meets cold caches anyway."""
    global _scrub
    if _scrub is None:
        _scrub = np.ones(SCRUB_BYTES // 8)
    _scrub.sum()


def measure_deserialization_scaling(systems, sizes, warmup, rounds, progress=log, failures=None):
    """Deserialization time by array size: an O(1) decoder is flat.

    Sizes and systems are interleaved round by round (rotating orders): run
    one size after the other, and any drift of the machine or of the store
    over the minute (its arena filling, other processes) reads as a trend
    with the size. Before each timed decode, untimed: the serialized form is
    made (HPRM's decode takes the delivery its encode announced, so each
    needs a fresh one), the caches are scrubbed (see scrub_caches) and the
    system settled (see HprmSer.settle)."""
    failures = {} if failures is None else failures
    live = [s for s in systems if s.scaling]
    arrays = {size: make_array(size, seed=size + 3) for size in sizes}
    samples = {(s.key, size): [] for s in live for size in sizes}
    tty = sys.stderr.isatty()
    gc.collect()
    gc.disable()
    try:
        for r in range(warmup + rounds):
            for size in sizes[r % len(sizes):] + sizes[: r % len(sizes)]:
                for s in live[r % len(live):] + live[: r % len(live)] if live else []:
                    if s not in live:
                        continue
                    try:
                        blob = s.ser(arrays[size])
                        scrub_caches()
                        s.settle()
                        t0 = time.perf_counter_ns()
                        value = s.de(blob)
                        t1 = time.perf_counter_ns()
                        del value, blob
                    except Exception as e:
                        drop(s, e, live, failures)
                        continue
                    if r >= warmup:
                        samples[(s.key, size)].append(t1 - t0)
            if tty:
                sys.stderr.write(f"\r    round {r + 1}/{warmup + rounds}")
                sys.stderr.flush()
    finally:
        gc.enable()
    if tty:
        sys.stderr.write("\r")
    results = {}
    for s in live:
        results[s.key] = [{"size_bytes": size, **summarize(samples[(s.key, size)])} for size in sizes]
    for size in sizes:
        parts = [f"{s.label} {summarize(samples[(s.key, size)])['median_us']:,.1f}" for s in live]
        progress(f"    {size_text(size):>6}, deserialize median µs: " + ", ".join(parts))
    return results


# ---------------------------------------------------------------------------
# Describing the run


def machine_info() -> dict:
    info = {"nproc": os.cpu_count(), "kernel": platform.release(), "python": platform.python_version()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["mem_gib"] = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def loadavg() -> list[float] | None:
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def versions() -> dict:
    out = {"python": platform.python_version(), "numpy": np.__version__}
    for dist in ("hprm", "pyarrow", "ros-rclpy", "ros-rmw-fastrtps-cpp", "ros-std-msgs"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        out["workspace"] = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
                                          capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


# ---------------------------------------------------------------------------
# The whole run


def run(mode: str, out_dir: Path, skip=(), store_bin=None, sizes=None, ser_size=SER_SIZE, deser_sizes=None,
        plan=None, store_memory=STORE_MEMORY, plasma_memory=PLASMA_MEMORY) -> dict:
    """The whole benchmark; returns the report (also written to out_dir).
    `plan` (rounds, see PLANS), the sizes and the stores' memory can be
    made small, as the smoke test does."""
    plan = dict(plan or PLANS[mode])
    sizes = sizes or WRITE_SIZES
    deser_sizes = deser_sizes or DESER_SIZES
    started = dt.datetime.now(dt.timezone.utc)
    report = {
        "benchmark": "python",
        "date": started.strftime("%Y-%m-%d"),
        "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "plan": {"mode": mode, **plan, "write_sizes": sizes, "ser_size": ser_size, "deser_sizes": deser_sizes,
                 "hprm_store_memory": store_memory, "plasma_memory": plasma_memory},
        "machine": machine_info(),
        "versions": versions(),
        "loadavg_start": loadavg(),
    }
    ok, skipped = available_baselines(skip)
    for name, why in skipped.items():
        log(f"==> skipping baseline {name}: {why}")
    failures: dict[str, str] = {}
    binary = find_hprm_store(store_bin)
    with tempfile.TemporaryDirectory(prefix="hprm-pybench-") as tmp:
        tmp = Path(tmp)
        log(f"==> starting hprm-store ({binary}, --memory {store_memory})")
        hstore = start_hprm_store(binary, tmp, store_memory)
        pstore = reader = None
        try:
            if "plasma" in ok:
                try:
                    log(f"==> starting plasma_store (-m {plasma_memory})")
                    pstore = start_plasma_store(tmp, plasma_memory)
                except BenchError as e:
                    skipped["plasma"] = f"plasma_store could not be started: {e}"
                    log(f"==> skipping baseline plasma: {skipped['plasma']}")
                    ok.discard("plasma")
            codec = hprm_codec(hstore.socket)
            log("==> priming the producer's mapping of the HPRM arena (one pass through it; see prime_codec)")
            report["prime_seconds"] = round(prime_codec(codec), 2)
            log(f"    {report['prime_seconds']} s")
            log("==> starting the reader process")
            reader = Reader(hstore.socket, pstore.socket if pstore else None)

            # -- workload 1
            systems = [HprmWrite(codec), HprmColdWrite(hstore.socket)]
            if pstore:
                try:
                    plasma = import_plasma()
                    pclient = plasma.connect(pstore.socket)
                    systems += [PlasmaPut(plasma, pclient), PlasmaCreate(plasma, pclient)]
                except Exception as e:
                    failures["plasma"] = f"cannot connect to plasma_store: {type(e).__name__}: {e}"
                    log(f"==> skipping baseline plasma: {failures['plasma']}")
            if "shm" in ok:
                systems.append(ShmWrite())
            systems += [MemcpyFloor(), HprmRoundTrip(codec)]
            log(f"==> workload 1: write delay, {len(sizes)} sizes x {plan['rounds']} rounds after {plan['warmup']} warm-up: "
                + ", ".join(s.label for s in systems))
            wd = measure_write_delay(systems, sizes, plan["warmup"], plan["rounds"], reader, failures=failures)
            report["write_delay"] = {
                "systems": {s.key: {"label": s.label, "points": wd[s.key]} for s in systems if s.key in wd},
            }

            # -- workload 2
            sers = [HprmSer(codec), HprmRelaySer(codec)]
            if hasattr(codec, "alloc_array"):  # newer SDKs
                sers.append(HprmAllocSer(codec))
            if hasattr(codec, "store_memory"):  # newer SDKs
                sers.append(HprmBornSer(codec))
            if "pickle" in ok:
                sers += [PickleInband(), PickleOutOfBand()]
            if "rclpy" in ok:
                try:
                    sers += [RclpyFast(), RclpyNaive()]
                except Exception as e:
                    failures["rclpy"] = f"failed to set up: {type(e).__name__}: {e}"
                    log(f"==> skipping baseline rclpy: {failures['rclpy']}")
            sers.append(MemcpySer())
            log(f"==> workload 2: serialize + deserialize a {size_text(ser_size)} float32 array, {plan['ser_rounds']} rounds "
                f"after {plan['ser_warmup']} warm-up ({plan['slow_rounds']} for the slow rclpy variant): " + ", ".join(s.label for s in sers))
            ser = measure_serialization(sers, ser_size, plan["ser_warmup"], plan["ser_rounds"], plan["slow_rounds"], failures=failures)
            for v in ser.values():
                v["ser_mbps"] = round(throughput_mbps(ser_size, v["ser"]["median_us"]), 1)
                v["de_mbps"] = round(throughput_mbps(ser_size, v["de"]["median_us"]), 1)
                v["roundtrip_mbps"] = round(throughput_mbps(ser_size, v["ser"]["median_us"] + v["de"]["median_us"]), 1)
            report["serialization"] = {"size_bytes": ser_size, "systems": ser}

            log(f"==> deserialization time by size ({', '.join(size_text(s) for s in deser_sizes)}), "
                f"{plan['scaling_rounds']} rounds after {plan['scaling_warmup']} warm-up")
            scaling = measure_deserialization_scaling(sers, deser_sizes, plan["scaling_warmup"], plan["scaling_rounds"], failures=failures)
            report["deserialization_scaling"] = {"systems": {k: {"label": ser.get(k, {}).get("label", k), "points": v} for k, v in scaling.items()}}

            stats = codec.store_stats()
            report["hprm_store_after"] = {k: int(stats[k]) for k in ("objects_sealed", "bytes_in_use", "evictions", "pending_deliveries", "expired_deliveries")}
        finally:
            if reader:
                reader.close()
            if pstore:
                pstore.stop()
            code = hstore.stop()
            report.setdefault("hprm_store_after", {})["exit_code_after_sigterm"] = code
    report["skipped"] = {**skipped, **failures}
    report["loadavg_end"] = loadavg()
    report["finished"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    import pyreport  # noqa: PLC0415  (beside this file)

    report["targets"] = pyreport.judge(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"python-{report['date']}"
    pyreport.write(report, stem)
    log(f"==> wrote {stem}.json and {stem}.md")
    report["json_path"] = f"{stem}.json"
    return report


def reader_entry(argv):
    """`pybench.py --reader FD [--hprm-socket S] [--plasma-socket S]`: the
    reader process (see Reader)."""
    parser = argparse.ArgumentParser(prog="pybench.py --reader")
    parser.add_argument("--reader", type=int, required=True)
    parser.add_argument("--hprm-socket")
    parser.add_argument("--plasma-socket")
    args = parser.parse_args(argv)
    conn = multiprocessing.connection.Connection(args.reader)
    try:
        reader_main(conn, args.hprm_socket, args.plasma_socket)
    except (EOFError, KeyboardInterrupt):
        pass  # the producer went away


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--reader"]:
        return reader_entry(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick", help="few rounds (default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full", help="the rounds the results are reported from")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="where python-DATE.{json,md} go")
    parser.add_argument("--skip", default="", help=f"comma-separated baselines to leave out: {', '.join(BASELINES)}")
    parser.add_argument("--store-bin", help="the hprm-store executable (default: $HPRM_BIN_DIR, the venv's bin/, target/release, PATH)")
    args = parser.parse_args(argv)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = skip - set(BASELINES)
    if unknown:
        parser.error(f"unknown baseline(s) for --skip: {', '.join(sorted(unknown))} (known: {', '.join(BASELINES)})")
    try:
        report = run(args.mode or "quick", args.out, skip=skip, store_bin=args.store_bin)
    except BenchError as e:
        sys.exit(f"pybench: {e}")
    for t in report["targets"]:
        log(f"target: {t['line']}")
    print(report["json_path"])  # for bench/python/run.sh: all else goes to stderr


if __name__ == "__main__":
    main()

"""Small packets beside the link's bulk data (issue 26: "small messages
and grants are never queued behind bulk data"): does the DSCP hprm-link
marks its connections with let them pass?

Two network namespaces joined by a veth pair (hprm-link/netns.sh), each
end's egress shaped by a tbf qdisc (default 1 Gbit/s) whose child is a
pfifo_fast (three bands by the packets' priority, which Linux derives from
the TOS byte). Each namespace runs its hprm-store and hprm-link; a bulk
load (hprm-link's push_load example) has host a's link push 10 MB objects
to host b without pause, and beside it a 32-byte TCP ping-pong from a to b
(unmarked, as the RTI's and peers' connections are by default) measures
the round trip. With --program, a real two-host program runs beside
the same load too: bench/broadcast/broadcast_hprm.py across the hosts
(centralized, the source and the RTI on host a, 4 receivers on host b),
1 KB values echoed back: each round is the RTI's grants and small
messages across the shaped link (values under 64 KiB travel in-band, not
through the links). Configurations, run interleaved (every repetition runs
each before the next repetition starts):
  - idle: no bulk load (the floor);
  - none: the links started with --dscp none (unmarked bulk);
  - AF11: the links' default;
  - CS1: --dscp CS1 (lower effort), which Linux maps to the unmarked
    traffic's band, so pfifo_fast cannot tell it apart;
and, for the program's own marks (someone else's bulk data beside a
control program; they change only the program, not the ping):
  - none+fed: unmarked bulk, the program's federates marked EF and
    socket priority 6 (`.realtime(socket_priority=6, dscp="EF")`), the
    RTI not (its accepted connections start at priority 0: the
    RTI->federate direction stays unmarked);
  - none+all: unmarked bulk, the federates and the RTI (`hprm-rti
    --socket-priority 6 --dscp EF`) marked;
  - AF11+all: the links' default, the federates and the RTI marked.
--configs picks some (default: all). With --program, the RTI's own grant
latency is read at the end of each program run from its status file
(rti.json in the launcher's runtime directory, written once more as the
RTI ends; the launcher removes that directory, so a thread of this script
reads the file every few milliseconds and keeps the last): per grant, from the federate's first NET or LTC since its
previous grant (it asked to go on) to the grant, so it holds the wait for
the upstream federates' progress as well as the RTI's queues; bucketed
(hprm_rti::figures::LATENCY_BOUNDS_NS), so p50/p99 are bucket bounds and
the mean is exact.

    python priority_bench.py [--bin-dir DIR] [--rate 1gbit] [--samples N] [--reps N] [--program ROUNDS]
        [--configs idle,none,...] [--name STEM] [--out DIR]

Needs root (namespaces, tc); --program needs the hprm SDK in this Python,
and the "+all" configurations an hprm-rti with --socket-priority and
--dscp (2026-11-28 on) where the launcher finds it.
DIR holds hprm-store, hprm-link and examples/push_load (default:
$HPRM_LINK_BIN_DIR, else target/release); build them into one target
directory, as hprm-link/test.sh does:
    export CARGO_TARGET_DIR=$PWD/target
    cargo build --release -p hprm-store
    cargo build --release --manifest-path hprm-link/Cargo.toml --bin hprm-link --example push_load
Prints the tables (the Markdown report, OUT/link-priority-DATE.md, quotes
them with the machine's note) and writes OUT/link-priority-DATE.json, and
.png where matplotlib is installed. The ping-pong's two ends run this
script too (`pong PORT`, `ping ADDR PORT N`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import shaping  # noqa: E402

NETNS = ROOT / "hprm-link" / "netns.sh"
BROADCAST = ROOT / "bench" / "broadcast"
PREFIX, SUBNET = "hprmprio", "10.214.0"
A, B = f"{SUBNET}.1", f"{SUBNET}.2"
# The bulk load's links; the program's own (idle: its values are small)
# listen on the default 7447.
LINK_PORT, PING_PORT = 7500, 7600
CONFIGS = ["idle", "none", "none+fed", "none+all", "AF11", "AF11+all", "CS1"]
# The program's marks: the federates' (`Federate.realtime`) and the RTI's.
PROGRAM_PRIORITY, PROGRAM_DSCP = 6, "EF"
NAMES = {
    "idle": "no bulk load",
    "none": "unmarked (`--dscp none`)",
    "none+fed": "unmarked; federates EF/6",
    "none+all": "unmarked; federates and RTI EF/6",
    "AF11": "AF11 (the default)",
    "AF11+all": "AF11; federates and RTI EF/6",
    "CS1": "CS1 (`--dscp CS1`)",
}


def bulk_mark(config: str) -> str:
    """The bulk load's links' mark: the part before '+'."""
    return config.split("+")[0]


MESSAGE = 32
# Between pings: small messages come at a control loop's pace, not back to
# back, and each then meets the queue the bulk data keeps full.
GAP_S = 0.001
# The bulk load's ramp before the first ping (TCP's slow start, the links'
# first pushes).
RAMP_S = 2.0


def log(msg: str) -> None:
    print(f"[link-priority {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pong(port: int) -> None:
    """Echoes MESSAGE-byte messages on one connection at a time."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen()
    print("ready", flush=True)
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while msg := recv_exactly(conn, MESSAGE):
                conn.sendall(msg)


def recv_exactly(conn: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        chunk = conn.recv(n - len(got))
        if not chunk:
            return b""
        got += chunk
    return got


def ping(addr: str, port: int, n: int) -> None:
    """Prints the round trips of n pings, in microseconds, as JSON."""
    conn = socket.create_connection((addr, port), timeout=10)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = bytes(range(MESSAGE))
    rtts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        conn.sendall(msg)
        if recv_exactly(conn, MESSAGE) != msg:
            raise SystemExit("ping: the echo differs")
        rtts.append(round((time.perf_counter_ns() - t0) / 1000, 1))
        time.sleep(GAP_S)
    print(json.dumps(rtts))


def sh(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), check=True, **kw)


def in_ns(h: str, *argv: str) -> list[str]:
    return ["ip", "netns", "exec", f"{PREFIX}-{h}", *argv]


def shape(rate: str) -> None:
    for h in "ab":
        shaping.shape(f"{PREFIX}-{h}", f"{PREFIX}-v{h}", rate)


def wait_for(path: Path, text: str, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while text not in (path.read_text(errors="replace") if path.exists() else ""):
        if time.monotonic() > deadline:
            raise SystemExit(f"no {text!r} in {path} within {limit:.0f} s; it ends: {path.read_text(errors='replace')[-600:]}")
        time.sleep(0.05)


class Hosts:
    """Both hosts' stores and links, the links marked as `config` says."""

    def __init__(self, bins: Path, tmp: Path, config: str):
        self.bins, self.tmp, self.config = bins, tmp, config
        self.procs: list[subprocess.Popen] = []

    def start(self, h: str, argv: list[str], logname: str) -> Path:
        logf = self.tmp / logname
        with open(logf, "wb") as out:
            self.procs.append(subprocess.Popen(in_ns(h, *argv), stdout=subprocess.DEVNULL, stderr=out, stdin=subprocess.DEVNULL))
        return logf

    def __enter__(self):
        mark = bulk_mark(self.config)
        dscp = [] if mark == "AF11" else ["--dscp", "none" if mark in ("none", "idle") else mark]
        for h, me, other, peer in (("a", A, B, "b"), ("b", B, A, "a")):
            d = self.tmp / h
            d.mkdir(exist_ok=True)
            store = self.start(h, [str(self.bins / "hprm-store"), "--socket", str(d / "store.sock"), "--memory", "512m"], f"store-{h}.log")
            wait_for(store, "hprm-store ready")
            link = self.start(
                h,
                [
                    str(self.bins / "hprm-link"),
                    *("--host", h, "--store", str(d / "store.sock"), "--socket", str(d / "link.sock")),
                    # One dialer a pair (a), as `hprm launch` wires hosts.
                    *("--listen", f"tcp/{me}:{LINK_PORT}", *(("--connect", f"tcp/{other}:{LINK_PORT}") if h < peer else ()), "--peer", peer),
                    *dscp,
                ],
                f"link-{h}.log",
            )
            wait_for(link, "hprm-link ready")
        for h, peer in (("a", "b"), ("b", "a")):
            wait_for(self.tmp / f"link-{h}.log", f"linked to host {peer}")
        return self

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def program_rounds(bins: Path, config: str, rounds: int, tmp: Path) -> tuple[list[float], dict]:
    """The round times (us) of broadcast_hprm.py across the hosts: 1 KB
    echoed by 4 receivers on host b to the source on host a; and the RTI's
    grant latency histogram, summed over the federates."""
    out = tmp / "program.json"
    key = tmp / "auth.key"
    key.write_text(os.urandom(32).hex())
    env = {**os.environ, "PATH": f"{bins}:{Path(sys.executable).parent}:{os.environ['PATH']}", "NO_COLOR": "1", "HPRM_AUTH_KEY_FILE": str(key)}
    if bulk_mark(config) not in ("AF11", "idle"):
        env["HPRM_LINK_DSCP"] = "none" if bulk_mark(config) == "none" else bulk_mark(config)
    argv = [sys.executable, str(BROADCAST / "broadcast_hprm.py"), "--coordination", "centralized", "--size", "1000", "--variant", "echo"]
    argv += ["--rounds", str(rounds), "--warmup", "20", "--out", str(out), "--hosts", f"{A},{B}"]
    if config.endswith(("+fed", "+all")):
        argv += ["--socket-priority", str(PROGRAM_PRIORITY), "--dscp", PROGRAM_DSCP]
    if config.endswith("+all"):
        argv += [f"--rti-arg=--socket-priority={PROGRAM_PRIORITY}", f"--rti-arg=--dscp={PROGRAM_DSCP}"]
    # Host a's launcher (and so the RTI) makes its runtime directory here.
    run_a = tmp / "run-a"
    run_a.mkdir(exist_ok=True)
    status = StatusWatch(run_a)
    procs = []
    for h in "ba":
        logf = open(tmp / f"program-{h}.log", "wb")
        procs.append(
            (
                subprocess.Popen(
                    in_ns(h, *argv),
                    cwd=BROADCAST,
                    env={**env, "HPRM_LAUNCH_HOST": h, **({"XDG_RUNTIME_DIR": str(run_a)} if h == "a" else {})},
                    stdout=logf,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                ),
                logf,
            )
        )
    try:
        for p, _ in procs:
            p.wait(120)
    finally:
        status.stop()
        for p, logf in procs:
            if p.poll() is None:
                os.killpg(p.pid, 15)
                p.wait()
            logf.close()
    try:
        doc = json.loads(out.read_text())
    except (OSError, ValueError):
        doc = {"error": "no result"}
    if "error" in doc:
        tail = (tmp / "program-a.log").read_text(errors="replace")[-1500:]
        raise SystemExit(f"the program failed ({doc['error']}); host a's log ends:\n{tail}")
    return [round(ns / 1000, 1) for ns in doc["latency_ns"]], status.grants()


class StatusWatch(threading.Thread):
    """Reads the RTI's status file (RUN/hprm-*/rti.json) every 2 ms until
    stopped and keeps the last one read: the launcher removes its runtime
    directory as the program ends, soon after the RTI's last write."""

    def __init__(self, run_dir: Path):
        super().__init__(daemon=True)
        self.dir, self.last, self.done = run_dir, None, threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.wait(0.002):
            for f in self.dir.glob("hprm-*/rti.json"):
                try:
                    self.last = json.loads(f.read_text())
                except (OSError, ValueError):
                    pass

    def stop(self) -> None:
        self.done.set()
        self.join()

    def grants(self) -> dict:
        """The grant latency histogram (hprm_rti::figures::HistogramCounts),
        summed over the federates; empty when none was read."""
        if not self.last:
            return {"counts": [], "sum_ns": 0}
        hists = [f["grant_latency"] for f in self.last["federates"]]
        counts = [sum(c) for c in zip(*(h["counts"] for h in hists))]
        return {"counts": counts, "sum_ns": sum(h["sum_ns"] for h in hists)}


# hprm_rti::figures::LATENCY_BOUNDS_NS: a bucket's upper bound; the last
# bucket is above all of them.
GRANT_BOUNDS_NS = [10e3, 25e3, 50e3, 100e3, 250e3, 500e3, 1e6, 2.5e6, 5e6, 10e6, 25e6, 50e6, 100e6, 250e6, 500e6, 1e9]


def grant_summary(hists: list[dict]) -> tuple[int, float, float, float]:
    """Grants, mean (ms), p50 and p99 (ms, bucket upper bounds, as the RTI's
    own quantiles) over several histograms."""
    counts = [sum(c) for c in zip(*(h["counts"] for h in hists if h["counts"]))]
    total = sum(counts)
    if not total:
        return 0, float("nan"), float("nan"), float("nan")

    def q(frac: float) -> float:
        rank, seen = max(1, math.ceil(frac * total)), 0
        for i, c in enumerate(counts):
            seen += c
            if seen >= rank:
                return GRANT_BOUNDS_NS[min(i, len(GRANT_BOUNDS_NS) - 1)] / 1e6
        return GRANT_BOUNDS_NS[-1] / 1e6

    return total, sum(h["sum_ns"] for h in hists) / total / 1e6, q(0.5), q(0.99)


def trial(bins: Path, config: str, samples: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="link-priority-") as t:
        tmp = Path(t)
        with Hosts(bins, tmp, config):
            load = None
            if config != "idle":
                loadlog = open(tmp / "load.log", "wb")
                load = subprocess.Popen(
                    [str(bins / "examples" / "push_load"), str(tmp / "a/store.sock"), str(tmp / "a/link.sock"), str(tmp / "b/store.sock")],
                    stdout=subprocess.DEVNULL,
                    stderr=loadlog,
                )
                time.sleep(RAMP_S)
            try:
                before = moved(tmp / "load.log")
                out = subprocess.run(
                    in_ns("a", sys.executable, __file__, "ping", B, str(PING_PORT), str(samples)), capture_output=True, text=True, check=True, timeout=300
                )
                after = moved(tmp / "load.log")
                rtts = json.loads(out.stdout)
                program, grants = program_rounds(bins, config, rounds, tmp) if rounds else ([], {"counts": [], "sum_ns": 0})
            finally:
                if load:
                    load.terminate()
                    load.wait()
                    loadlog.close()
            bulk = 0.0
            if load:
                text = (tmp / "load.log").read_text(errors="replace")
                if "rror" in text:
                    raise SystemExit(f"the bulk load failed: {text[-800:]}")
                # The rate while the pings ran.
                bulk = (after[1] - before[1]) * 8 / 1e6 / (after[0] - before[0])
    return {"rtt_us": rtts, "bulk_mbit_s": bulk, "program_round_us": program, "grant_latency": grants}


def moved(loadlog: Path) -> tuple[float, int]:
    """Now, and the bytes the bulk load has moved by its last report (at
    most 100 ms ago)."""
    found = re.findall(r"push_load: moved ([0-9]+)", loadlog.read_text(errors="replace")) if loadlog.exists() else []
    return time.monotonic(), int(found[-1]) if found else 0


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def report(results: dict, meta: dict) -> str:
    rows = []
    configs = list(results)
    for c in configs:
        rtts = [x for t in results[c] for x in t["rtt_us"]]
        bulk = [t["bulk_mbit_s"] for t in results[c]]
        rows.append((c, len(rtts), pct(rtts, 0.5), pct(rtts, 0.99), max(rtts), statistics.mean(bulk)))
    # The pings are unmarked traffic: only a bulk load marked otherwise
    # than the base's can lower them; beside the same bulk marks (none+fed,
    # none+all against none) a ratio would be noise, so none is shown.
    by_name = {r[0]: r for r in rows}
    base = by_name.get("none") or next((r for r in rows if r[0] != "idle" and bulk_mark(r[0]) == "none"), None)
    lines = [
        f"| bulk data marked | pings | p50 (ms) | p99 (ms) | max (ms) | bulk through the links (Mbit/s) | p50, p99 vs {NAMES[base[0]] if base else 'unmarked (not run)'} |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for c, n, p50, p99, mx, bulk in rows:
        comparable = base is not None and c != "idle" and bulk_mark(c) != bulk_mark(base[0])
        ratio = f"{base[2] / p50:.1f}x, {base[3] / p99:.1f}x lower" if comparable else "—"
        lines.append(f"| {NAMES[c]} | {n} | {p50 / 1000:.3f} | {p99 / 1000:.3f} | {mx / 1000:.2f} | {bulk:.0f} | {ratio} |")
    if any(t["program_round_us"] for c in configs for t in results[c]):
        lines += [
            "",
            "| bulk data marked; program marked | program rounds | p50 (ms) | p99 (ms) | max (ms) | grants | grant mean (ms) | grant p50, p99 (ms, bucket bounds) |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for c in configs:
            r = [x for t in results[c] for x in t["program_round_us"]]
            n, mean, g50, g99 = grant_summary([t["grant_latency"] for t in results[c]])
            lines.append(
                f"| {NAMES[c]} | {len(r)} | {pct(r, 0.5) / 1000:.2f} | {pct(r, 0.99) / 1000:.2f} | {max(r) / 1000:.2f} | {n} | {mean:.3f} | {g50:g}, {g99:g} |"
            )
    return "\n".join(lines), rows


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = [("rtt_us", "32-byte TCP round trip, host a to b (ms)")]
    if any(t["program_round_us"] for c in results for t in results[c]):
        panels.append(("program_round_us", "program round: 1 KB to 4 receivers on b and back (ms)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4), squeeze=False)
    for ax, (key, xlabel) in zip(axes[0], panels):
        for c in results:
            xs = sorted(x / 1000 for t in results[c] for x in t[key])
            ax.plot(xs, [i / len(xs) for i in range(len(xs))], label=c if c != "idle" else "no bulk load")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("fraction")
        ax.legend(title="bulk data marked (+program marked)")
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle("Beside hprm-link pushing 10 MB objects at 1 Gbit/s (tbf + pfifo_fast)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "pong":
        return pong(int(sys.argv[2]))
    if len(sys.argv) > 1 and sys.argv[1] == "ping":
        return ping(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_bins = os.environ.get("HPRM_LINK_BIN_DIR") or str(ROOT / "target" / "release")
    ap.add_argument("--bin-dir", type=Path, default=Path(default_bins))
    ap.add_argument("--rate", default="1gbit", help="the shaped link's rate (tc's syntax)")
    ap.add_argument("--samples", type=int, default=2000, help="pings per trial")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--program", type=int, default=0, metavar="ROUNDS", help="also run the two-host program for ROUNDS measured rounds per trial")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated, of " + ", ".join(CONFIGS))
    ap.add_argument("--name", help="the results' file stem in --out (default: link-priority-DATE)")
    args = ap.parse_args()
    configs = args.configs.split(",")
    if bad := [c for c in configs if c not in CONFIGS]:
        raise SystemExit(f"priority_bench: unknown configurations {bad}; known: {', '.join(CONFIGS)}")
    if os.geteuid() != 0:
        raise SystemExit("priority_bench: needs root (network namespaces, tc)")
    for b in ("hprm-store", "hprm-link", "examples/push_load"):
        if not (args.bin_dir / b).is_file():
            raise SystemExit(f"priority_bench: no {b} in {args.bin_dir} (see --help for the build)")
    subprocess.run([str(NETNS), "down", PREFIX], check=False)
    sh(str(NETNS), "up", PREFIX, SUBNET)
    pong_proc = None
    try:
        shape(args.rate)
        pong_proc = subprocess.Popen(in_ns("b", sys.executable, __file__, "pong", str(PING_PORT)), stdout=subprocess.PIPE, text=True)
        assert pong_proc.stdout and pong_proc.stdout.readline().strip() == "ready"
        results: dict = {c: [] for c in configs}
        for rep in range(args.reps):
            for c in configs:
                t = trial(args.bin_dir, c, args.samples, args.program)
                results[c].append(t)
                prog = t["program_round_us"]
                n, mean, g50, g99 = grant_summary([t["grant_latency"]])
                prog_text = (
                    f"; program round p50 {pct(prog, 0.5) / 1000:.2f} ms, p99 {pct(prog, 0.99) / 1000:.2f} ms; "
                    f"{n} grants, mean {mean:.3f} ms, p50 {g50:g} p99 {g99:g} ms"
                    if prog
                    else ""
                )
                log(
                    f"rep {rep + 1}/{args.reps} {c:>5}: ping p50 {pct(t['rtt_us'], 0.5) / 1000:.3f} ms, "
                    f"p99 {pct(t['rtt_us'], 0.99) / 1000:.3f} ms, bulk {t['bulk_mbit_s']:.0f} Mbit/s{prog_text}"
                )
    finally:
        if pong_proc:
            pong_proc.kill()
            pong_proc.wait()
        subprocess.run([str(NETNS), "down", PREFIX], check=False)
    date = dt.date.today().isoformat()
    stem = args.out / (args.name or f"link-priority-{date}")
    if stem.with_suffix(".json").exists():
        stem = stem.with_name(stem.name + time.strftime("-%H%M%S"))
    meta = {
        "rate": args.rate,
        "samples": args.samples,
        "program_rounds": args.program,
        "reps": args.reps,
        "configs": configs,
        "bins": str(args.bin_dir),
        "cpus": os.cpu_count(),
    }
    table, rows = report(results, meta)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}))
    plotted = plot(results, stem.with_suffix(".png"))
    log(f"wrote {stem}.json" + (" and .png" if plotted else " (no matplotlib: no plot)"))


if __name__ == "__main__":
    main()

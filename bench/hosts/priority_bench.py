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
    traffic's band, so pfifo_fast cannot tell it apart.

    python priority_bench.py [--bin-dir DIR] [--rate 1gbit] [--samples N] [--reps N] [--program ROUNDS] [--out DIR]

Needs root (namespaces, tc); --program needs the hprm SDK in this Python.
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
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
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
CONFIGS = ["idle", "none", "AF11", "CS1"]
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
        dscp = [] if self.config == "AF11" else ["--dscp", "none" if self.config in ("none", "idle") else self.config]
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
                    *("--listen", f"tcp/{me}:{LINK_PORT}", "--connect", f"tcp/{other}:{LINK_PORT}", "--peer", peer),
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


def program_rounds(bins: Path, config: str, rounds: int, tmp: Path) -> list[float]:
    """The round times (us) of broadcast_hprm.py across the hosts: 1 KB
    echoed by 4 receivers on host b to the source on host a."""
    out = tmp / "program.json"
    key = tmp / "auth.key"
    key.write_text(os.urandom(32).hex())
    env = {**os.environ, "PATH": f"{bins}:{Path(sys.executable).parent}:{os.environ['PATH']}", "NO_COLOR": "1", "HPRM_AUTH_KEY_FILE": str(key)}
    if config not in ("AF11", "idle"):
        env["HPRM_LINK_DSCP"] = "none" if config == "none" else config
    argv = [sys.executable, str(BROADCAST / "broadcast_hprm.py"), "--coordination", "centralized", "--size", "1000", "--variant", "echo"]
    argv += ["--rounds", str(rounds), "--warmup", "20", "--out", str(out), "--hosts", f"{A},{B}"]
    procs = []
    for h in "ba":
        logf = open(tmp / f"program-{h}.log", "wb")
        procs.append(
            (
                subprocess.Popen(
                    in_ns(h, *argv),
                    cwd=BROADCAST,
                    env={**env, "HPRM_LAUNCH_HOST": h},
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
    return [round(ns / 1000, 1) for ns in doc["latency_ns"]]


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
                program = program_rounds(bins, config, rounds, tmp) if rounds else []
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
    return {"rtt_us": rtts, "bulk_mbit_s": bulk, "program_round_us": program}


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
    for c in CONFIGS:
        rtts = [x for t in results[c] for x in t["rtt_us"]]
        bulk = [t["bulk_mbit_s"] for t in results[c]]
        rows.append((c, len(rtts), pct(rtts, 0.5), pct(rtts, 0.99), max(rtts), statistics.mean(bulk)))
    base = {r[0]: r for r in rows}["none"]
    lines = [
        "| bulk data marked | pings | p50 (ms) | p99 (ms) | max (ms) | bulk through the links (Mbit/s) | p50, p99 vs unmarked |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    names = {"idle": "no bulk load", "none": "unmarked (`--dscp none`)", "AF11": "AF11 (the default)", "CS1": "CS1 (`--dscp CS1`)"}
    for c, n, p50, p99, mx, bulk in rows:
        ratio = f"{base[2] / p50:.1f}x, {base[3] / p99:.1f}x lower" if c not in ("none", "idle") else ""
        lines.append(f"| {names[c]} | {n} | {p50 / 1000:.3f} | {p99 / 1000:.3f} | {mx / 1000:.2f} | {bulk:.0f} | {ratio} |")
    if any(t["program_round_us"] for t in results["none"]):
        lines += ["", "| bulk data marked | program rounds | p50 (ms) | p99 (ms) | max (ms) |", "|---|---:|---:|---:|---:|"]
        for c in CONFIGS:
            r = [x for t in results[c] for x in t["program_round_us"]]
            lines.append(f"| {names[c]} | {len(r)} | {pct(r, 0.5) / 1000:.2f} | {pct(r, 0.99) / 1000:.2f} | {max(r) / 1000:.2f} |")
    return "\n".join(lines), rows


def plot(results: dict, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    panels = [("rtt_us", "32-byte TCP round trip, host a to b (ms)")]
    if any(t["program_round_us"] for t in results["none"]):
        panels.append(("program_round_us", "program round: 1 KB to 4 receivers on b and back (ms)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4), squeeze=False)
    for ax, (key, xlabel) in zip(axes[0], panels):
        for c in CONFIGS:
            xs = sorted(x / 1000 for t in results[c] for x in t[key])
            ax.plot(xs, [i / len(xs) for i in range(len(xs))], label=c if c != "idle" else "no bulk load")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("fraction")
        ax.legend(title="link's bulk data marked")
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
    args = ap.parse_args()
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
        results: dict = {c: [] for c in CONFIGS}
        for rep in range(args.reps):
            for c in CONFIGS:
                t = trial(args.bin_dir, c, args.samples, args.program)
                results[c].append(t)
                prog = t["program_round_us"]
                prog_text = f"; program round p50 {pct(prog, 0.5) / 1000:.2f} ms, p99 {pct(prog, 0.99) / 1000:.2f} ms" if prog else ""
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
    stem = args.out / f"link-priority-{date}"
    meta = {"rate": args.rate, "samples": args.samples, "program_rounds": args.program, "reps": args.reps, "bins": str(args.bin_dir), "cpus": os.cpu_count()}
    table, rows = report(results, meta)
    print(table)
    stem.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}))
    plotted = plot(results, stem.with_suffix(".png"))
    log(f"wrote {stem}.json" + (" and .png" if plotted else " (no matplotlib: no plot)"))


if __name__ == "__main__":
    main()

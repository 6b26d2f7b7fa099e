"""Soak: the driving pipeline and the 10 MB broadcast, side by side for
--minutes (default 30), sampling every process's memory and open files and
the store's use, then a verdict: bounded or not.

What runs: one hprm-store (as a host's systemd store would be), and two
programs launched against it (HPRM_LAUNCH_STORE), each with its own RTI
and one process per federate: the driving pipeline
(examples/python/driving/driving.py, centralized, fast: as fast as its
CPU inference goes) and the broadcast of workload 3
(bench/broadcast/broadcast_hprm.py: a fresh 10 MB array each round to 4
receivers, which reply with fresh arrays of their own, centralized, fast).
Both run with no end; at the deadline both launchers get SIGTERM (a stop
at a common tag, as Ctrl-C).

What is sampled every --interval seconds: RSS (VmRSS) and its anonymous
part (RssAnon: the heap, where a leak shows; every process maps the
store's arena, which is shared memory) and open file descriptors of every
process of both programs (launcher, RTI, each federate) and of the store;
the store's bytes in use and object count (`hprm-store stats`); and the
messages each program's federates sent (their status files), so that a
stuck program fails the soak instead of passing it.

Verdict. Warm-up: the first third of the run, at most 5 minutes; samples
in it are shown, not judged. Each sampled series (a process's RSS, its
fds, the store's bytes and objects) GROWS if both
  - its least-squares slope over the samples after warm-up is positive
    beyond noise: the lower end of the slope's 95% confidence interval
    (Student's t, n - 2 degrees of freedom) is above 0, and
  - the growth that slope adds up to over the judged window is material:
    more than --tolerance (default 5%) of the series' mean, more than a
    floor per figure (1 MiB of RSS or store bytes, 1 fd, 1 object), and
    more than three times the samples' own scatter around the fitted line
    (their residual standard deviation),
so that neither a tiny but steady drift of a big number nor noise alone
reads as a leak. The scatter term is for the store's figures, which are
a queue's level: they move by whole 10 MB messages from one sample to
the next, and a machine that gets busier mid-run deepens the queue for a
while; a level shift that small against its own swing is not told apart
from a leak in a short run, while a leak keeps growing past any swing
(the 30-minute run). Steady series (RSS, fds) scatter little, so the
term leaves their limits as they were. The run is BOUNDED when no series grows and, once both
programs have ended, the store is back to its starting use: no object is
held (referenced, or awaiting a delivery, after at most the store's
delivery TTL), and after evicting what it keeps as cache (settled objects,
which the store gives back under pressure: `hprm-store evict`) its bytes
in use and objects equal those before the programs started. The raw use
before that eviction is reported too.

Writes OUT/soak-DATE.{csv,md,png} (CSV: t_s, program, process, figure,
value, one row per figure sampled). Exit status: 0 bounded, 1 not
bounded, 2 the soak itself failed (a program died, a tool is missing).

    python bench/soak/soak.py [--minutes 30] [--interval 5] [--out bench/results] [--name soak-DATE]
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE.parent / "common"))

MIB = 1 << 20
# The smallest growth over the judged window that can be a leak, by figure.
FLOORS = {"rss_bytes": MIB, "anon_bytes": MIB, "fds": 1, "store_bytes": MIB, "store_objects": 1}
# A growth within this many residual standard deviations of the samples is noise (see the verdict above).
SCATTERS = 3
WARMUP_MAX_S = 300.0
STOP_WITHIN_S = 120.0  # for both programs to stop after SIGTERM
STORE_MEMORY = "1G"
DELIVERY_TTL = "30s"


class SoakFailed(Exception):
    """The soak could not run to its end (not a verdict)."""


def log(msg: str) -> None:
    print(msg, flush=True)


def programs(tmp: Path) -> dict[str, list[str]]:
    """Both run until stopped, and keep no per-step samples (a benchmark's
    own records would grow: the pipeline's --forever; the broadcast records
    measured rounds only, and every round here is a warm-up round)."""
    py = sys.executable
    return {
        "pipeline": [py, str(ROOT / "examples/python/driving/driving.py"), "--coordination", "centralized", "--forever"],
        "broadcast": [py, str(ROOT / "bench/broadcast/broadcast_hprm.py"), "--coordination", "centralized",
                      "--size", str(10_000_000), "--variant", "fresh", "--rounds", "1", "--warmup", str(10**12),
                      "--out", str(tmp / "broadcast.json")],
    }


def find_store_binary() -> Path:
    for d in filter(None, [os.environ.get("HPRM_BIN_DIR"), str(Path(sys.prefix) / "bin")]):
        if (Path(d) / "hprm-store").is_file():
            return Path(d) / "hprm-store"
    found = shutil.which("hprm-store")
    if not found:
        raise SoakFailed("hprm-store is not in $HPRM_BIN_DIR, this venv's bin/ or PATH; install the SDK with hprm-py/install.sh VENV and run this with VENV/bin/python")
    return Path(found)


# ------------------------------------------------------------ sampling


def children_of() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def descendants(pid: int, kids: dict[int, list[int]]) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def role(pid: int, launcher: int) -> str | None:
    """What process `pid` is in its program: launcher, rti, or a federate's name."""
    if pid == launcher:
        return "launcher"
    try:
        exe = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    if exe.endswith(b"hprm-rti"):
        return "rti"
    for kv in env:
        if kv.startswith(b"HPRM_FEDERATE="):
            return kv.split(b"=", 1)[1].decode()
    return None  # a helper process (e.g. a compiler a library started): not the program's


def memory_and_fds(pid: int) -> tuple[int, int, int] | None:
    """RSS, its anonymous part (the heap: where a leak shows; the store's
    arena, mapped by every process, is shared memory) and open fds."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    kb = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith(("VmRSS:", "RssAnon:"))}
    if "VmRSS" not in kb:
        return None
    return kb["VmRSS"], kb.get("RssAnon", 0), fds


def messages_sent(tmp: Path) -> dict[int, int]:
    """By launcher pid: the messages its federates have sent so far (their
    status files, as `hprm ps` reads them), to tell a running program from
    a stuck one."""
    sent: dict[int, int] = {}
    for launch in tmp.glob("hprm-*/launch.json"):
        try:
            pid = json.loads(launch.read_text())["pid"]
            sent[pid] = sum(json.loads(f.read_text()).get("messages_out", 0) for f in launch.parent.glob("status-*.json"))
        except (OSError, ValueError, KeyError):
            continue
    return sent


def store_stats(store_bin: Path, socket: Path) -> dict:
    out = subprocess.run([str(store_bin), "stats", "--socket", str(socket), "--json"], capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise SoakFailed(f"hprm-store stats failed: {out.stderr.strip()}")
    return json.loads(out.stdout)


def sample(t: float, launchers: dict[str, subprocess.Popen], store: subprocess.Popen, store_bin: Path, socket: Path) -> list[tuple]:
    rows = []
    kids = children_of()
    for name, p in launchers.items():
        for pid in descendants(p.pid, kids):
            r = role(pid, p.pid)
            got = memory_and_fds(pid) if r else None
            if got:
                rows += [(t, name, r, "rss_bytes", got[0]), (t, name, r, "anon_bytes", got[1]), (t, name, r, "fds", got[2])]
    got = memory_and_fds(store.pid)
    if got:
        rows += [(t, "store", "hprm-store", "rss_bytes", got[0]), (t, "store", "hprm-store", "anon_bytes", got[1]),
                 (t, "store", "hprm-store", "fds", got[2])]
    s = store_stats(store_bin, socket)
    rows += [(t, "store", "hprm-store", "store_bytes", s["bytes_in_use"]),
             (t, "store", "hprm-store", "store_objects", s["objects_sealed"] + s["objects_created"])]
    return rows


# ------------------------------------------------------------- verdict

# Student's t, 97.5% quantile, by degrees of freedom (above 30: 1.96 + a
# correction good to 0.01).
T975 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def t975(df: int) -> float:
    if df > 30:
        return 1.96 + 2.4 / df
    return T975[max(k for k in T975 if k <= df)]


def fit(ts: list[float], ys: list[float]) -> dict:
    """Least squares y = a + b t: the slope b, its 95% confidence interval."""
    n = len(ts)
    mt, my = sum(ts) / n, sum(ys) / n
    stt = sum((t - mt) ** 2 for t in ts)
    b = sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / stt
    a = my - b * mt
    resid = sum((y - a - b * t) ** 2 for t, y in zip(ts, ys))
    scatter = math.sqrt(resid / (n - 2)) if n > 2 else math.inf
    se = scatter / math.sqrt(stt) if n > 2 else math.inf
    half = t975(n - 2) * se if n > 2 else math.inf
    return {"slope": b, "low": b - half, "high": b + half, "mean": my, "scatter": scatter}


def judge(rows: list[tuple], warmup_s: float, tolerance: float) -> list[dict]:
    series: dict[tuple, list[tuple[float, float]]] = {}
    for t, prog, proc, fig, v in rows:
        if t >= warmup_s:
            series.setdefault((prog, proc, fig), []).append((t, float(v)))
    out = []
    for (prog, proc, fig), pts in sorted(series.items()):
        if len(pts) < 4:
            out.append({"program": prog, "process": proc, "figure": fig, "samples": len(pts), "grows": False,
                        "note": "too few samples after warm-up to judge"})
            continue
        ts, ys = [p[0] for p in pts], [p[1] for p in pts]
        f = fit(ts, ys)
        window = ts[-1] - ts[0]
        growth = f["slope"] * window
        limit = max(tolerance * abs(f["mean"]), FLOORS[fig], SCATTERS * f["scatter"])
        grows = f["low"] > 0 and growth > limit
        out.append({"program": prog, "process": proc, "figure": fig, "samples": len(pts), "mean": f["mean"],
                    "slope_per_min": f["slope"] * 60, "ci_per_min": (f["low"] * 60, f["high"] * 60),
                    "growth": growth, "limit": limit, "grows": grows})
    return out


# --------------------------------------------------------------- report


def fmt(fig: str, v: float) -> str:
    if fig in ("rss_bytes", "anon_bytes", "store_bytes"):
        return f"{v / MIB:,.1f} MiB"
    return f"{v:,.1f}"


def markdown(meta: dict, verdicts: list[dict], end: dict, bounded: bool) -> str:
    lines = [f"# Soak, {meta['date']}", "",
             f"`bench/soak/soak.py --minutes {meta['minutes']:g} --interval {meta['interval']:g}` on {meta['machine']}; "
             f"{meta['samples']} samples over {meta['elapsed_s'] / 60:.1f} minutes, warm-up {meta['warmup_s']:.0f} s "
             f"(the first third of the run, at most 5 minutes). Programs: {', '.join(meta['programs'])}, against one "
             f"hprm-store (--memory {STORE_MEMORY} --populate). Plot: [{meta['name']}.png]({meta['name']}.png); "
             f"samples: {meta['name']}.csv.", "",
             f"**Verdict: {'BOUNDED' if bounded else 'NOT BOUNDED'}.** A series grows when the lower end of its "
             f"least-squares slope's 95% confidence interval is above 0 and the growth that slope adds up to over the "
             f"judged window exceeds {meta['tolerance']:.0%} of its mean, a floor (1 MiB, 1 fd, 1 object) and "
             f"{SCATTERS} times the samples' scatter around the fitted line (residual standard deviation).", "",
             "| program | process | figure | samples | mean | slope / min (95% CI) | growth over window | limit | grows |",
             "|---|---|---|---:|---:|---|---:|---:|---|"]
    for v in verdicts:
        if "mean" not in v:
            lines.append(f"| {v['program']} | {v['process']} | {v['figure']} | {v['samples']} | | | | | {v['note']} |")
            continue
        lo, hi = v["ci_per_min"]
        lines.append(f"| {v['program']} | {v['process']} | {v['figure']} | {v['samples']} | {fmt(v['figure'], v['mean'])} | "
                     f"{fmt(v['figure'], v['slope_per_min'])} ({fmt(v['figure'], lo)} .. {fmt(v['figure'], hi)}) | "
                     f"{fmt(v['figure'], v['growth'])} | {fmt(v['figure'], v['limit'])} | {'**yes**' if v['grows'] else 'no'} |")
    lines += ["", "The store after both programs ended:", "",
              "| | bytes in use | objects | held (referenced / pending deliveries) |", "|---|---:|---:|---|"]
    for k, label in (("start", "before the programs"), ("after", "after they ended"), ("evicted", "after evicting the cache")):
        s = end[k]
        lines.append(f"| {label} | {s['bytes_in_use'] - s['bytes_reserved']:,} | {s['objects_sealed'] + s['objects_created']:,} | "
                     f"{s['objects_referenced']} / {s['pending_deliveries']} |")
    lines += ["", f"Back to its starting use: {'yes' if end['back'] else '**no**'} ({end['why']}).", ""]
    return "\n".join(lines)


def plot(rows: list[tuple], warmup_s: float, path: Path) -> None:
    from plotting import plt  # bench/common: matplotlib with the Agg backend

    figs = (("rss_bytes", "RSS (MiB)", MIB), ("anon_bytes", "anonymous RSS (MiB)", MIB), ("fds", "open fds", 1), ("store_bytes", "store in use (MiB)", MIB),
            ("store_objects", "store objects", 1))
    fig, axes = plt.subplots(len(figs), 1, figsize=(10, 14), sharex=True)
    for ax, (name, label, scale) in zip(axes, figs):
        series: dict[str, list[tuple[float, float]]] = {}
        for t, prog, proc, f, v in rows:
            if f == name:
                series.setdefault(f"{prog}/{proc}", []).append((t / 60, v / scale))
        for key, pts in sorted(series.items()):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=key, linewidth=1)
        ax.axvspan(0, warmup_s / 60, color="grey", alpha=0.15, label="warm-up" if name == "rss_bytes" else None)
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=6, ncol=3, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[-1].set_xlabel("minutes")
    fig.suptitle("soak: the driving pipeline and the 10 MB broadcast")
    fig.tight_layout()
    fig.savefig(path, dpi=100, bbox_inches="tight")


# ----------------------------------------------------------------- run


def stop(launchers: dict[str, subprocess.Popen]) -> None:
    for p in launchers.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_WITHIN_S
    for name, p in launchers.items():
        try:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log(f"soak: {name} did not stop within {STOP_WITHIN_S:.0f} s of SIGTERM; killing it")
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def settle(store_bin: Path, socket: Path, start: dict) -> dict:
    """The store once both programs have ended: waits (at most its delivery
    TTL and a margin) until nothing is held, then evicts its cache."""
    deadline = time.monotonic() + 45
    while True:
        after = store_stats(store_bin, socket)
        if (after["objects_referenced"] == 0 and after["pending_deliveries"] == 0) or time.monotonic() > deadline:
            break
        time.sleep(1)
    subprocess.run([str(store_bin), "evict", "--socket", str(socket)], check=True, capture_output=True, timeout=30)
    evicted = store_stats(store_bin, socket)
    used = lambda s: (s["bytes_in_use"] - s["bytes_reserved"], s["objects_sealed"] + s["objects_created"])  # noqa: E731
    held = evicted["objects_referenced"] + evicted["pending_deliveries"]
    back = used(evicted) == used(start) and held == 0
    why = (f"{used(evicted)[0]:,} bytes and {used(evicted)[1]} objects in use after eviction, {used(start)[0]:,} and "
           f"{used(start)[1]} before the programs; {evicted['objects_referenced']} objects referenced, "
           f"{evicted['pending_deliveries']} deliveries pending")
    return {"start": start, "after": after, "evicted": evicted, "back": back, "why": why}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples (default 5)")
    ap.add_argument("--tolerance", type=float, default=0.05, help="growth over the judged window allowed, as a fraction of the mean (default 0.05)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="directory for soak-DATE.{csv,md,png}")
    ap.add_argument("--name", help="file stem (default soak-DATE)")
    a = ap.parse_args(argv)
    if a.minutes <= 0 or a.interval <= 0:
        ap.error("--minutes and --interval must be positive")
    name = a.name or f"soak-{dt.date.today().isoformat()}"
    a.out.mkdir(parents=True, exist_ok=True)
    duration = a.minutes * 60
    warmup_s = min(duration / 3, WARMUP_MAX_S)
    try:
        return soak(a, name, duration, warmup_s)
    except SoakFailed as e:
        log(f"soak: error: {e}")
        return 2


def soak(a, name: str, duration: float, warmup_s: float) -> int:
    store_bin = find_store_binary()
    # A short base: socket paths under it must fit in 107 bytes.
    tmp = Path(tempfile.mkdtemp(prefix="hprm-soak-", dir="/tmp"))
    socket = tmp / "store.sock"
    store_log = open(tmp / "hprm-store.log", "w")
    store = subprocess.Popen([str(store_bin), "--socket", str(socket), "--memory", STORE_MEMORY, "--populate",
                              "--delivery-ttl", DELIVERY_TTL], stdout=subprocess.DEVNULL, stderr=store_log)
    launchers: dict[str, subprocess.Popen] = {}
    try:
        deadline = time.monotonic() + 60
        while not socket.exists():
            if store.poll() is not None or time.monotonic() > deadline:
                raise SoakFailed(f"hprm-store did not start; its log: {(tmp / 'hprm-store.log').read_text()}")
            time.sleep(0.05)
        time.sleep(0.2)
        start = store_stats(store_bin, socket)
        env = dict(os.environ, HPRM_LAUNCH_STORE=str(socket), XDG_RUNTIME_DIR=str(tmp), NO_COLOR="1",
                   RUST_LOG=os.environ.get("RUST_LOG", "warn"), PYTHONUNBUFFERED="1")
        for prog, argv in programs(tmp).items():
            out = open(tmp / f"{prog}.log", "w")
            launchers[prog] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log(f"soak: {', '.join(launchers)} against one store, {a.minutes:g} min, a sample every {a.interval:g} s, "
            f"warm-up {warmup_s:.0f} s; logs in {tmp}")
        rows: list[tuple] = []
        progress: list[dict[str, int]] = []  # messages sent by each program, per judged sample
        t0 = time.monotonic()
        samples = 0
        while (t := time.monotonic() - t0) < duration:
            for prog, p in launchers.items():
                if p.poll() is not None:
                    tail = (tmp / f"{prog}.log").read_text()[-3000:]
                    raise SoakFailed(f"{prog} ended by itself (exit status {p.returncode}) after {t:.0f} s; the end of its log:\n{tail}")
            got = sample(round(t, 1), launchers, store, store_bin, socket)
            rows += got
            samples += 1
            anon = {prog: sum(v for _, pr, _, f, v in got if pr == prog and f == "anon_bytes") for prog in launchers}
            fds = {prog: sum(v for _, pr, _, f, v in got if pr == prog and f == "fds") for prog in launchers}
            sb = next(v for *_, f, v in got if f == "store_bytes")
            so = next(v for *_, f, v in got if f == "store_objects")
            sent = messages_sent(tmp)
            if t >= warmup_s:
                progress.append({prog: sent.get(p.pid, 0) for prog, p in launchers.items()})
            log(f"[{int(t) // 60:3d}:{int(t) % 60:02d} / {int(duration) // 60}:{int(duration) % 60:02d}] "
                + ", ".join(f"{prog}: {sent.get(launchers[prog].pid, 0):,} messages, anon {anon[prog] / MIB:,.0f} MiB, {fds[prog]} fds"
                            for prog in launchers)
                + f"; store {sb / MIB:,.1f} MiB in {so} objects" + (" (warm-up)" if t < warmup_s else ""))
            time.sleep(max(0.0, a.interval - (time.monotonic() - t0 - t)))
        elapsed = time.monotonic() - t0
        stuck = [prog for prog in launchers if len(progress) < 2 or progress[-1][prog] <= progress[0][prog]]
        if stuck:
            raise SoakFailed(f"{', '.join(stuck)} sent no message after warm-up: a stuck program proves nothing (logs in {tmp})")
        log("soak: stopping both programs (SIGTERM)")
        stop(launchers)
        end = settle(store_bin, socket, start)
    finally:
        stop(launchers)
        store.terminate()
        store.wait(timeout=30)
        store_log.close()

    verdicts = judge(rows, warmup_s, a.tolerance)
    growing = [v for v in verdicts if v["grows"]]
    bounded = not growing and end["back"]
    stem = a.out / name
    with open(stem.with_suffix(".csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "program", "process", "figure", "value"])
        w.writerows(rows)
    import platform

    meta = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "minutes": a.minutes,
            "interval": a.interval, "tolerance": a.tolerance, "samples": samples, "elapsed_s": elapsed,
            "warmup_s": warmup_s, "programs": list(launchers), "name": name,
            "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, Linux {platform.release()}"}
    stem.with_suffix(".md").write_text(markdown(meta, verdicts, end, bounded))
    plot(rows, warmup_s, stem.with_suffix(".png"))
    for v in growing:
        log(f"soak: GROWS: {v['program']}/{v['process']} {v['figure']}: {fmt(v['figure'], v['growth'])} over the judged window "
            f"(limit {fmt(v['figure'], v['limit'])}), slope {fmt(v['figure'], v['slope_per_min'])}/min")
    log(f"soak: the store after the programs: {'back to its starting use' if end['back'] else 'NOT back to its starting use'} ({end['why']})")
    log(f"soak: {'BOUNDED' if bounded else 'NOT BOUNDED'}; report {stem.with_suffix('.md')}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if bounded else 1


if __name__ == "__main__":
    sys.exit(main())

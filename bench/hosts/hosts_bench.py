"""Broadcast and gather across two hosts (issue 26, item 7): a source on host
a, 4 receivers on host b, echo and fresh replies, 1 KB to 50 MB, over one
veth link between two network namespaces of this machine
(hprm-link/netns.sh), unshaped and limited to 1 Gbit/s on both ends as
shaping.py does (tbf, with a pfifo_fast child so that the link's
AF11-marked bulk data waits behind small packets).

Systems, run interleaved (every repetition runs every system at every point
before the next repetition starts, so that the machine's load drifts over
all of them alike):
  - tcp floor, zenoh floor (floors.py): the bytes the workload needs at
    least, over the same link;
  - HPRM centralized and decentralized: bench/broadcast/broadcast_hprm.py
    with --hosts, each host's share launched in its namespace
    (HPRM_LAUNCH_HOST), each host its own store and hprm-link;
  - ROS 2 rclpy (Fast DDS over UDP, multicast discovery on the veth) and
    dora-rs (its coordinator and a daemon per namespace), when installed
    and when they run across the namespaces; otherwise the results say why.
Then the host-loss detection time: hprm-link/tests/multihost/cut.toml runs
across the hosts, the link is set down, and the time until each side names
the host it lost is measured.

    python hosts_bench.py [--quick] [--out DIR] [--skip KEYS] [--reps N]
        [--sizes BYTES,..] [--variants echo,fresh] [--shapes unshaped,1gbit]
        [--cuts N] [--name STEM]

Needs root (namespaces, tc) and the hprm SDK in this Python, hprm-link on
PATH (bench/run.sh --only hosts builds it). Writes DIR/hosts-DATE.{md,json,png}
(DATE-quick for --quick).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BROADCAST = ROOT / "bench" / "broadcast"
NETNS = ROOT / "hprm-link" / "netns.sh"
CUT = ROOT / "hprm-link" / "tests" / "multihost"
sys.path.insert(0, str(ROOT / "bench" / "python"))
sys.path.insert(0, str(HERE))
import shaping  # noqa: E402
from pybench import summarize  # noqa: E402

KB, MB = 1_000, 1_000_000
PLANS = {
    "quick": dict(sizes=[1 * KB, 1 * MB, 10 * MB, 50 * MB], variants=["echo"], shapes=["unshaped", "1gbit"], rounds=3, warmup=1, reps=1, cuts=1),
    "full": dict(sizes=[1 * KB, 1 * MB, 10 * MB, 50 * MB], variants=["echo", "fresh"], shapes=["unshaped", "1gbit"], rounds=5, warmup=1, reps=2, cuts=3),
}
# A trial (a program run of warmup + rounds rounds) gets this long to start
# plus this long per round before it is stopped and reported as timed out.
START_S, ROUND_S = 90, 10
LABELS = {
    "tcp": "raw TCP floor",
    "zenoh": "raw Zenoh floor",
    "hprm_centralized": "HPRM centralized",
    "hprm_decentralized": "HPRM decentralized",
    "ros2": "ROS 2 rclpy (Fast DDS, UDP)",
    "dora": "dora-rs 1.1 (a daemon per host)",
}
BASELINES = ("ros2", "dora")
# Each shape's rate (None: the veth as it is).
SHAPES = {"unshaped": None, "1gbit": "1gbit"}
# The host timeout of HPRM's broadcast trials. With the default (500 ms)
# the 1 Gbit/s link saturated by 10 and 50 MB pushes delayed the RTI's
# small packets past it when the shaping was tbf with its FIFO child
# (they queued behind the bulk data, and some were dropped), and the RTI's
# connections broke (TCP_USER_TIMEOUT); shaping.py's pfifo_fast child now
# puts the link's AF11-marked bulk data behind them, as a switch honouring
# DSCP would. Kept at 2 s so that runs compare with the earlier ones. The
# host-loss measurement keeps the default.
HOST_TIMEOUT = "2s"


def log(msg: str) -> None:
    print(f"[hosts {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def size_text(n: int) -> str:
    return f"{n // MB} MB" if n >= MB else f"{n // KB} KB"


class Hosts:
    """Two namespaces joined by a veth pair; shape() limits both ends of
    the link to 1 Gbit/s (shaping.py), or takes the limit off."""

    def __init__(self, prefix: str, subnet: str):
        self.prefix, self.subnet = prefix, subnet
        self.a, self.b = f"{subnet}.1", f"{subnet}.2"

    def __enter__(self):
        subprocess.run([str(NETNS), "down", self.prefix], check=False)
        subprocess.run([str(NETNS), "up", self.prefix, self.subnet], check=True)
        for h in "ab":
            # Multicast (ROS 2's discovery) needs a route on the link.
            subprocess.run(["ip", "-n", f"{self.prefix}-{h}", "route", "add", "224.0.0.0/4", "dev", f"{self.prefix}-v{h}"], check=True)
        return self

    def __exit__(self, *exc):
        subprocess.run([str(NETNS), "down", self.prefix], check=False)

    def ns(self, h: str) -> str:
        return f"{self.prefix}-{h}"

    def shape(self, shape: str) -> None:
        for h in "ab":
            shaping.shape(self.ns(h), f"{self.prefix}-v{h}", SHAPES[shape])

    def link(self, up: bool) -> None:
        subprocess.run(["ip", "-n", self.ns("a"), "link", "set", f"{self.prefix}-va", "up" if up else "down"], check=True)


def stop_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(5)
            return
        except subprocess.TimeoutExpired:
            continue


def run_sides(sides: list[tuple[str, list[str], dict]], out: Path, limit: float, logs: Path) -> dict:
    """Starts each (namespace, argv, env) at once, waits for all within
    `limit`; the samples side a wrote to `out`, or {"error": ...}."""
    procs = []
    for i, (ns, argv, env) in enumerate(sides):
        lf = open(logs.with_suffix(f".{i}.log"), "wb")
        procs.append(
            (
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, *argv],
                    cwd=BROADCAST,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=lf,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                ),
                lf,
            )
        )
    deadline = time.monotonic() + limit
    timed_out = False
    for p, lf in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        lf.close()
    for p, _ in procs:
        if p.poll() is None:
            stop_group(p)
    try:
        doc = json.loads(out.read_text())
    except (OSError, ValueError):
        tails = []
        for i in range(len(sides)):
            text = logs.with_suffix(f".{i}.log").read_text(errors="replace")
            tails.append(f"side {i}: ..." + text[-800:])
        why = f"timed out after {limit:.0f} s" if timed_out else "no result"
        return {"error": f"{why}; the logs end:\n" + "\n".join(tails)}
    return doc


def trial(key: str, hosts: Hosts, size: int, variant: str, rounds: int, warmup: int, tmp: Path, env: dict) -> dict:
    """One program run of `key` at one point: its samples or {"error": ...}."""
    stem = tmp / f"{key}-{variant}-{size}-{time.monotonic_ns()}"
    out = stem.with_suffix(".json")
    common = ["--size", str(size), "--variant", variant, "--rounds", str(rounds), "--warmup", str(warmup), "--out", str(out)]
    py = sys.executable
    if key in ("tcp", "zenoh"):
        peer = hosts.b if key == "tcp" else hosts.a
        sides = [(hosts.ns(h), [py, str(HERE / "floors.py"), key, h, "--peer", peer, *common], env) for h in "ba"]
    elif key.startswith("hprm_"):
        argv = [py, str(BROADCAST / "broadcast_hprm.py"), "--coordination", key[5:], *common, "--hosts", f"{hosts.a},{hosts.b}"]
        sides = [(hosts.ns(h), argv, {**env, "HPRM_LAUNCH_HOST": h, "HPRM_HOST_TIMEOUT": HOST_TIMEOUT}) for h in "ba"]
    elif key == "ros2":
        argv = [py, str(BROADCAST / "broadcast_ros2.py"), "--transport", "plain", *common, "--receivers-netns", hosts.ns("b")]
        sides = [(hosts.ns("a"), argv, env)]
    elif key == "dora":
        argv = [py, str(BROADCAST / "broadcast_dora.py"), *common, "--hosts", f"{hosts.prefix},{hosts.a},{hosts.b}"]
        # It starts the coordinator and the daemons in their namespaces itself.
        return run_sides_host(argv, out, START_S + (rounds + warmup) * ROUND_S, stem, env)
    else:
        raise ValueError(key)
    return run_sides(sides, out, START_S + (rounds + warmup) * ROUND_S, stem)


def run_sides_host(argv: list[str], out: Path, limit: float, stem: Path, env: dict) -> dict:
    """Runs a program in the root namespace (it places its own parts)."""
    with open(stem.with_suffix(".0.log"), "wb") as lf:
        p = subprocess.Popen(argv, cwd=BROADCAST, env=env, stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            p.wait(limit)
        except subprocess.TimeoutExpired:
            stop_group(p)
    try:
        return json.loads(out.read_text())
    except (OSError, ValueError):
        return {"error": "no result; the log ends:\n" + stem.with_suffix(".0.log").read_text(errors="replace")[-1500:]}


def unavailable(env: dict) -> dict[str, str]:
    """Why each optional system cannot run here (absent: it can)."""
    why = {}
    py = sys.executable

    def probe(code):
        r = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env)
        return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]

    if err := probe("import zenoh"):
        why["zenoh"] = f"the eclipse-zenoh wheel does not import ({err}); pip install eclipse-zenoh"
    if err := probe("import rclpy, std_msgs.msg"):
        why["ros2"] = f"rclpy does not import ({err}); bench/run.sh installs ROS 2 (ros2-bridge/setup-ros2.sh)"
    if err := probe("import dora, pyarrow"):
        why["dora"] = f"dora does not import ({err}); pip install dora-rs-cli dora-rs pyarrow"
    if shutil.which("hprm-link", path=env["PATH"]) is None:
        raise SystemExit("hosts_bench: hprm-link is not on PATH: build it (cargo build --release --manifest-path hprm-link/Cargo.toml)")
    return why


def detect_loss(hosts: Hosts, env: dict, tmp: Path) -> dict:
    """Runs cut.toml across the hosts, sets the link down once host b has
    its first array; seconds until host a names host b lost, host b names
    host a lost, and host b's receiver reports the RTI's host lost."""
    shutil.copy(CUT / "reactors.py", tmp / "reactors.py")
    program = tmp / "cut.toml"
    program.write_text((CUT / "cut.toml").read_text().replace("@A@", hosts.a).replace("@B@", hosts.b))
    hprm = shutil.which("hprm", path=str(Path(sys.executable).parent)) or "hprm"
    lines: dict[str, list[str]] = {"a": [], "b": []}
    stamps: dict[str, float] = {}
    procs = {}

    def reader(h, p):
        for line in p.stdout:
            lines[h].append(line)
            for key, text in (("a_lost_b", "lost host b"), ("b_lost_a", "lost host a"), ("rti_lost", "the RTI's host stopped answering")):
                if text in line and key not in stamps:
                    stamps[key] = time.monotonic()

    for h in "ba":
        p = subprocess.Popen(
            ["ip", "netns", "exec", hosts.ns(h), hprm, "launch", "--host", h, str(program)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**env, "NO_COLOR": "1"},
            cwd=tmp,
            start_new_session=True,
        )
        threading.Thread(target=reader, args=(h, p), daemon=True).start()
        procs[h] = p
    result: dict = {}
    try:
        deadline = time.monotonic() + START_S
        while not any("GOT " in line for line in lines["b"]):
            if time.monotonic() > deadline:
                return {"error": "host b got no array within the start limit:\n" + "".join(lines["b"][-20:])}
            time.sleep(0.01)
        hosts.link(False)
        cut = time.monotonic()
        deadline = cut + 15
        while len(stamps) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        hosts.link(True)
        result = {k: round(stamps[k] - cut, 3) for k in stamps}
        for p in procs.values():
            p.wait(60)
    finally:
        hosts.link(True)
        for p in procs.values():
            if p.poll() is None:
                stop_group(p)
    missing = {"a_lost_b", "b_lost_a", "rti_lost"} - set(result)
    if missing:
        result["error"] = f"not noticed within 15 s: {sorted(missing)}"
    return result


def _summary(plan, skipped, samples, errors, loss) -> dict:
    points_out = {}
    for point, doc in samples.items():
        s = summarize(doc["latency_ns"])
        s.pop("samples_us")
        points_out[point] = s
    return {"plan": plan, "labels": LABELS, "skipped": skipped, "points": points_out, "errors": errors, "host_loss": loss, "host_timeout": HOST_TIMEOUT}


def measure(plan: dict, skip: set[str], env: dict, on_rep=None) -> dict:
    """Every system at every point, interleaved, then the host-loss cuts;
    on_rep(partial result) after each repetition (a long run leaves a
    report even when it is stopped)."""
    why = unavailable(env)
    keys = [k for k in LABELS if k not in skip and k not in why]
    skipped = {k: why.get(k, "skipped on request (--skip)") for k in LABELS if k not in keys}
    for k, reason in skipped.items():
        log(f"{LABELS[k]}: skipped: {reason}")
    samples: dict[str, dict[str, list[int]]] = {}
    errors: dict[str, str] = {}
    failed: dict[tuple[str, str, str], int] = {}
    points = [(shape, variant, size) for shape in plan["shapes"] for variant in plan["variants"] for size in plan["sizes"]]
    total = plan["reps"] * len(points) * len(keys)
    done = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hosts-", dir="/tmp") as tmp_s, Hosts(f"hb{os.getpid() % 10000}", f"10.216.{os.getpid() % 250}") as hosts:
        tmp = Path(tmp_s)
        for rep in range(plan["reps"]):
            for shape, variant, size in points:
                hosts.shape(shape)
                for key in keys:
                    done += 1
                    point = f"{key}|{shape}|{variant}|{size}"
                    tag = f"[{done}/{total}, {time.monotonic() - started:.0f} s] rep {rep + 1} {shape} {variant} {size_text(size)} {LABELS[key]}"
                    if key in BASELINES and failed.get((key, shape, variant), size + 1) <= size:
                        log(f"{tag}: not run (failed at a smaller size)")
                        continue
                    doc = trial(key, hosts, size, variant, plan["rounds"], plan["warmup"], tmp, env)
                    if doc.get("error"):
                        errors[point] = doc["error"]
                        log(f"{tag}: FAILED: {doc['error'][:600]}")
                        if key in BASELINES:
                            failed[(key, shape, variant)] = size
                        continue
                    samples.setdefault(point, {"latency_ns": []})["latency_ns"] += doc["latency_ns"]
                    med = statistics.median(doc["latency_ns"]) / 1e6
                    log(f"{tag}: median {med:.2f} ms")
            if on_rep:
                on_rep(_summary({**plan, "reps": rep + 1}, skipped, samples, errors, []))
        hosts.shape("unshaped")
        loss = []
        for i in range(plan["cuts"]):
            log(f"host-loss detection {i + 1}/{plan['cuts']}: cutting the link under cut.toml")
            r = detect_loss(hosts, env, tmp)
            log(f"  {r}")
            loss.append(r)
    return _summary(plan, skipped, samples, errors, loss)


def _median_ms(r: dict, key: str, shape: str, variant: str, size: int) -> float | None:
    p = r["points"].get(f"{key}|{shape}|{variant}|{size}")
    return None if p is None else p["median_us"] / 1e3


def report(r: dict, stem: Path, note: str) -> None:
    plan = r["plan"]
    keys = [k for k in LABELS if any(p.startswith(k + "|") for p in r["points"])]
    md = [
        f"# Broadcast and gather across two hosts ({stem.name})",
        "",
        "Issue 26, item 7: a source on host a sends an S-byte numpy array to 4 receivers on host b; each replies "
        "(echo: the array it received; fresh: a new S-byte array); latency = from the source's send to the last reply. "
        "The hosts are two network namespaces of one machine joined by a veth pair; `1gbit`: "
        f"{shaping.describe('1gbit')} on both ends of the link (this kernel has no netem), so that hprm-link's bulk data, "
        "marked AF11, waits behind unmarked small packets such as the RTI's. "
        f"Medians in ms of all the rounds of {plan['reps']} interleaved repetition(s) of {plan['rounds']} rounds, pooled "
        f"(after {plan['warmup']} warm-up rounds each), produced by `{r.get('command', 'bench/run.sh --only hosts')}`.",
        "",
        note,
        "",
        f"HPRM's broadcast trials run with `HPRM_HOST_TIMEOUT={r.get('host_timeout', HOST_TIMEOUT)}`: with the default 500 ms "
        "and tbf's default FIFO child (before the pfifo_fast child), a 1 Gbit/s link saturated by 10 and 50 MB pushes delayed "
        "the RTI's small packets past the host timeout, and the RTI's connections broke (hosts-2026-11-27.md).",
        "",
        "Floors: raw TCP moves exactly the bytes the workload needs (echo: S bytes a->b + 4 x 16-byte replies; "
        "fresh: plus 4 x S bytes b->a) on one connection; raw Zenoh the same bytes as Zenoh puts between two peers "
        "(eclipse-zenoh, TCP, congestion control BLOCK, its send queue and receive pool tuned as hprm-link's: "
        "a floor is what Zenoh can do), the receiver copying each payload out.",
        "",
    ]
    for k, why in r["skipped"].items():
        md.append(f"- **{LABELS[k]}: not run.** {why}")
    md.append("")
    for shape in plan["shapes"]:
        for variant in plan["variants"]:
            md += [f"## {variant}, {shape}", "", "| size | " + " | ".join(LABELS[k] for k in keys) + " | HPRM c. / TCP |", "|---" * (len(keys) + 2) + "|"]
            for size in plan["sizes"]:
                cells = []
                for k in keys:
                    v = _median_ms(r, k, shape, variant, size)
                    cells.append("failed" if v is None and f"{k}|{shape}|{variant}|{size}" in r["errors"] else ("-" if v is None else f"{v:.2f}"))
                h, t = _median_ms(r, "hprm_centralized", shape, variant, size), _median_ms(r, "tcp", shape, variant, size)
                ratio = f"{h / t:.2f}x" if h and t else "-"
                md.append(f"| {size_text(size)} | " + " | ".join(cells) + f" | {ratio} |")
            md.append("")
    md += ["## Targets", ""]
    md += targets(r)
    if r["host_loss"]:
        md += ["", "## Host-loss detection", ""]
        md += host_loss(r)
    if r["errors"]:
        md += ["", "## Failures", ""]
        for point, e in sorted(r["errors"].items()):
            first = e.strip().splitlines()[0] if e.strip() else "?"
            md.append(f"- `{point}`: {first[:300]}")
    md += ["", f"![latency]({stem.name}.png)", ""]
    stem.with_suffix(".md").write_text("\n".join(md))
    stem.with_suffix(".json").write_text(json.dumps(r, indent=1))
    plot(r, stem.with_suffix(".png"))


def host_loss(r: dict) -> list[str]:
    md = [
        "cut.toml (hprm-link/tests/multihost) runs across the hosts with the default `HPRM_HOST_TIMEOUT` (500 ms); once host b "
        "has its first array the veth is set down; seconds from the cut until host a's link logs `lost host b`, host b's "
        "`lost host a`, and host b's receiver fails with `the RTI's host stopped answering`:",
        "",
        "| cut | host a: lost host b | host b: lost host a | receiver: RTI lost |",
        "|---|---|---|---|",
    ]
    for i, c in enumerate(r["host_loss"]):
        md.append(
            f"| {i + 1} | {c.get('a_lost_b', '-')} s | {c.get('b_lost_a', '-')} s | {c.get('rti_lost', '-')} s |" + (f" {c['error']}" if "error" in c else "")
        )
    return md


def targets(r: dict) -> list[str]:
    plan = r["plan"]
    out = []
    for shape in plan["shapes"]:
        for variant in plan["variants"]:
            for size in (10 * MB, 50 * MB):
                if size not in plan["sizes"]:
                    continue
                t = _median_ms(r, "tcp", shape, variant, size)
                for k in ("hprm_centralized", "hprm_decentralized"):
                    h = _median_ms(r, k, shape, variant, size)
                    if h is None or t is None:
                        continue
                    met = "met" if h <= 1.5 * t else "NOT met"
                    out.append(f"- {LABELS[k]} within 1.5x of raw TCP, {size_text(size)} {variant} {shape}: **{met}** ({h:.2f} ms vs {t:.2f} ms, {h / t:.2f}x)")
            for b in BASELINES:
                for size in [s for s in plan["sizes"] if s >= MB]:
                    h = _median_ms(r, "hprm_centralized", shape, variant, size)
                    v = _median_ms(r, b, shape, variant, size)
                    if h is None:
                        continue
                    if v is None:
                        if f"{b}|{shape}|{variant}|{size}" in r["errors"] or b not in r["skipped"]:
                            out.append(f"- faster than {LABELS[b]}, {size_text(size)} {variant} {shape}: {b} failed or was not run at this size")
                        continue
                    met = "met" if h < v else "NOT met"
                    out.append(f"- faster than {LABELS[b]}, {size_text(size)} {variant} {shape}: **{met}** ({h:.2f} ms vs {v:.2f} ms, {v / h:.1f}x)")
    skipped = [LABELS[b] for b in BASELINES if b in r["skipped"]]
    if skipped:
        out.append(f"- faster than {', '.join(skipped)}: **not measured** (see above why)")
    return out


def plot(r: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = r["plan"]
    panels = [(shape, variant) for variant in plan["variants"] for shape in plan["shapes"]]
    cols = len(plan["shapes"])
    rows = len(plan["variants"])
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4.2 * rows), squeeze=False)
    for i, (shape, variant) in enumerate(panels):
        ax = axes[i // cols][i % cols]
        for k, label in LABELS.items():
            xs, ys = [], []
            for size in plan["sizes"]:
                v = _median_ms(r, k, shape, variant, size)
                if v is not None:
                    xs.append(size / MB)
                    ys.append(v)
            if xs:
                ax.plot(xs, ys, marker="o", label=label, linestyle="--" if k in ("tcp", "zenoh") else "-")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("payload (MB)")
        ax.set_ylabel("median round latency (ms)")
        ax.set_title(f"source on host a -> 4 receivers on host b, {variant}, {shape}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--skip", default="", help="comma-separated keys: " + ", ".join(LABELS))
    ap.add_argument("--reps", type=int, help="interleaved repetitions (default: the plan's)")
    ap.add_argument("--sizes", help="comma-separated bytes (default: the plan's)")
    ap.add_argument("--variants", help="comma-separated, of echo, fresh (default: the plan's)")
    ap.add_argument("--shapes", help="comma-separated, of " + ", ".join(SHAPES) + " (default: the plan's)")
    ap.add_argument("--cuts", type=int, help="host-loss detection runs (default: the plan's; 0: none)")
    ap.add_argument("--name", help="the results' file stem in --out (default: hosts-DATE, hosts-DATE-quick)")
    ap.add_argument("--note", default="", help="a sentence for the results file (e.g. how loaded the machine was)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("hosts_bench: needs root (network namespaces, tc)")
    plan = dict(PLANS["quick" if a.quick else "full"])
    if a.reps:
        plan["reps"] = a.reps
    if a.sizes:
        plan["sizes"] = [int(x) for x in a.sizes.split(",")]
    for field, given, allowed in (("variants", a.variants, ("echo", "fresh")), ("shapes", a.shapes, tuple(SHAPES))):
        if given:
            chosen = given.split(",")
            if bad := [x for x in chosen if x not in allowed]:
                sys.exit(f"hosts_bench: --{field}: unknown {bad}; choose from {', '.join(allowed)}")
            plan[field] = chosen
    if a.cuts is not None:
        plan["cuts"] = a.cuts
    env = dict(os.environ)
    key = Path(tempfile.mkdtemp(prefix="hosts-key-", dir="/tmp")) / "auth.key"
    key.write_text(os.urandom(16).hex())
    env["HPRM_AUTH_KEY_FILE"] = str(key)
    env.pop("ROS_LOCALHOST_ONLY", None)
    # Fast DDS would use shared memory between the namespaces (one machine):
    # UDP only, as between two computers.
    env["FASTDDS_BUILTIN_TRANSPORTS"] = "UDPv4"
    env.setdefault("RUST_LOG", "warn")
    env["NO_COLOR"] = "1"
    load = os.getloadavg()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    stem = Path(a.out) / (a.name or f"hosts-{date}{'-quick' if a.quick else ''}")
    # The command line, for the results file: run.sh's, unless a narrower
    # plan than run.sh asks for was chosen here.
    narrowed = a.name or a.sizes or a.variants or a.shapes or a.cuts is not None or a.reps
    command = f"bench/run.sh --only hosts{' --quick' if a.quick else ''}"
    if narrowed:
        command = "bench/hosts/hosts_bench.py " + " ".join(x for x in sys.argv[1:])

    def write(r):
        r["command"] = command
        r["machine"] = {"cpus": os.cpu_count(), "loadavg_at_start": [round(x, 2) for x in load], "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]}
        note = a.note or (
            f"Machine: {os.cpu_count()} CPUs shared with other work (load average {load[0]:.1f} at the start, "
            f"{os.getloadavg()[0]:.1f} at the end): figures are noisy; compare systems within one run."
        )
        report(r, stem, note)
        log(f"wrote {stem}.md, .json, .png")

    write(measure(plan, set(filter(None, a.skip.split(","))), env, on_rep=write))
    shutil.rmtree(key.parent, ignore_errors=True)


if __name__ == "__main__":
    main()

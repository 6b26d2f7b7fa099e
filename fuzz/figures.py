#!/usr/bin/env python3
"""Prints the figures of the last fuzz/run.sh as Markdown, from fuzz/logs/:
per target, libFuzzer's executions, rate, edges and features covered,
corpus size, crashes; then llvm-cov's line and region coverage of the
decoder's own files (cargo fuzz coverage over the minimized corpus).

    python3 fuzz/figures.py [target...] > bench/results/fuzz-DATE.md-part

(py_payload's logs and corpus are under hprm-py/fuzz/, its own project.)
"""

import pathlib
import re
import sys

FUZZ = pathlib.Path(__file__).resolve().parent
# Targets in a project of their own: its folder.
PROJECTS = {"py_payload": FUZZ.parent / "hprm-py" / "fuzz"}


def folder(target, kind):
    """The target's logs/ or corpus/ folder."""
    return PROJECTS.get(target, FUZZ) / kind

# The files holding each target's decoder (what "coverage per decoder" measures).
DECODERS = {
    "rti_frames": ["hprm-rti/src/wire.rs", "hprm-rti/src/frames.rs"],
    "store_frames": ["hprm-store/src/protocol/frame.rs", "hprm-store/src/protocol/message.rs"],
    "store_handshake": ["hprm-store/src/protocol/handshake.rs"],
    "outbox": ["hprm-store/src/outbox.rs"],
    "payload": [
        "hprm-node/src/payload/decoder.rs",
        "hprm-node/src/payload/msgpack.rs",
        "hprm-node/src/payload/descriptor.rs",
        "hprm-node/src/payload/buffer.rs",
        "hprm-node/src/payload/dtype.rs",
    ],
    "manifest": [
        "hprm-node/src/manifest/mod.rs",
        "hprm-node/src/manifest/check.rs",
        "hprm-node/src/manifest/bank.rs",
    ],
    "bridge_config": ["ros2-bridge/src/config.rs"],
    "py_payload": ["hprm-py/src/codec.rs"],
    "mcap": ["hprm-cli/src/recording.rs"],
    "link_wire": ["hprm-link/src/wire.rs"],
}


def run_figures(target):
    log = folder(target, "logs") / f"{target}.log"
    if not log.exists():
        return None
    text = log.read_text(errors="replace")
    # Fork mode's status lines: "#EXECS: cov: N ft: N corp: N exec/s N oom/timeout/crash: a/b/c time: Ns ..."
    last = re.findall(
        r"^#(\d+): cov: (\d+) ft: (\d+) corp: (\d+) exec/s:? (\d+) oom/timeout/crash: (\d+)/(\d+)/(\d+) time: (\d+)s",
        text,
        re.M,
    )
    if not last:
        return {"execs": "?", "rate": "?", "cov": "?", "ft": "?", "faults": "?", "secs": "?"}
    execs, cov, ft, _corp, _rate, oom, timeout, crash, secs = last[-1]
    rate = int(execs) // max(int(secs), 1)
    return {"execs": execs, "rate": rate, "cov": cov, "ft": ft, "faults": f"{oom}/{timeout}/{crash}", "secs": secs}


def coverage(target):
    cov = folder(target, "logs") / f"{target}.cov"
    if not cov.exists():
        return []
    rows = []
    for line in cov.read_text().splitlines():
        parts = line.split()
        if not parts:
            continue
        name = parts[0]
        for f in DECODERS[target]:
            if name.endswith(f):
                # Filename Regions Missed Cover Functions Missed Executed Lines Missed Cover ...
                rows.append((f, parts[3], parts[9]))
    return rows


def main():
    out = sys.stdout
    targets = sys.argv[1:] or list(DECODERS)
    out.write("| target | seconds | executions | exec/s (mean) | edges (cov) | features | corpus (minimized) | OOM/timeout/crash |\n")
    out.write("|---|---|---|---|---|---|---|---|\n")
    for t in targets:
        f = run_figures(t)
        if f is None:
            out.write(f"| `{t}` | not run | | | | | | |\n")
            continue
        files = list((folder(t, "corpus") / t).glob("*"))
        size = sum(p.stat().st_size for p in files)
        out.write(f"| `{t}` | {f['secs']} | {f['execs']} | {f['rate']} | {f['cov']} | {f['ft']} | {len(files)} files, {size} B | {f['faults']} |\n")
    out.write("\nCoverage of each decoder's files by its minimized corpus (`cargo fuzz coverage`, llvm-cov):\n\n")
    out.write("| target | file | regions | lines |\n|---|---|---|---|\n")
    for t in targets:
        for f, regions, lines in coverage(t):
            out.write(f"| `{t}` | `{f}` | {regions} | {lines} |\n")


main()

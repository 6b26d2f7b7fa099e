"""Where the benchmarks find dora-rs's command line: the one rule for every
dora baseline (Arrow, broadcast, pipeline, recording).

The `dora` beside the running Python comes first: `bench/run.sh` installs
dora-rs-cli into the benchmark's venv, and `dora run` spawns the nodes'
`python` from there; a `dora` on PATH is the fallback.
"""

from __future__ import annotations

import os
import shutil
import sys


def dora_command() -> str | None:
    """The `dora` executable, or None when dora-rs-cli is not installed."""
    return shutil.which("dora", path=os.path.dirname(sys.executable)) or shutil.which("dora")

"""The ``hprm`` command (installed with the package).

Today: ``hprm launch [--fast] [--timeout D] PROGRAM.py [ARGS...]`` runs a
Python program (its ``Program.launch()`` starts the store, the RTI and every
federate), and ``hprm store stats|list [--socket PATH] [--json]`` asks a
running store. The full CLI (graph, ps, trace, deploy) is issue 5's.
"""

from __future__ import annotations

import argparse
import os
import runpy
import shutil
import subprocess
import sys


def _launch(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.program):
        print(f"hprm: no such program file: {args.program}", file=sys.stderr)
        return 2
    if args.fast:
        os.environ["HPRM_FAST"] = "1"
    if args.timeout:
        os.environ["HPRM_LAUNCH_TIMEOUT"] = args.timeout
    sys.argv = [args.program, *args.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.program)))
    runpy.run_path(args.program, run_name="__main__")
    return 0


def _store(args: argparse.Namespace) -> int:
    exe = shutil.which("hprm-store", path=os.environ.get("HPRM_BIN_DIR")) or shutil.which("hprm-store")
    if exe is None:
        print("hprm: cannot find hprm-store; install the SDK with hprm-py/install.sh", file=sys.stderr)
        return 2
    cmd = [exe, args.what, "--socket", args.socket] + (["--json"] if args.json else [])
    return subprocess.call(cmd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hprm", description="HPRM: deterministic, zero-copy robotic middleware")
    sub = p.add_subparsers(dest="command", required=True)
    launch = sub.add_parser("launch", help="run a Python program: a store, an RTI and every federate")
    launch.add_argument("program", help="a Python file defining an hprm.Program and calling its launch()")
    launch.add_argument("--fast", action="store_true", help="logical time does not wait for physical time")
    launch.add_argument("--timeout", help="kill the program after this long (e.g. 30s)")
    launch.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the program")
    store = sub.add_parser("store", help="ask a running hprm-store")
    store.add_argument("what", choices=["stats", "list"])
    store.add_argument("--socket", required=True, help="the store's socket")
    store.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.command == "launch":
        if args.args and args.args[0] == "--":
            args.args = args.args[1:]
        return _launch(args)
    return _store(args)


if __name__ == "__main__":
    sys.exit(main())

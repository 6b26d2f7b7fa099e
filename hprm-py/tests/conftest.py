"""Fixtures shared by the hprm-py tests: real daemons, no mocks.

- ``store_bin``: the ``hprm-store`` executable. Looked up in
  ``$HPRM_BIN_DIR``, then the workspace's ``target/release`` and
  ``target/debug``, then the virtual environment's ``bin/`` (where
  ``install.sh`` puts it), then ``PATH``. When none has it, the tests that
  need it fail saying how to build it (``cargo build --release -p
  hprm-store -p hprm-rti``).
- ``store``: a fresh ``hprm-store`` per test, on a socket in a temporary
  directory, started and waited for until it accepts connections; the test
  gets a ``Store`` (``.socket``, ``.log()``). Killed and reaped at the end of
  the test, so tests never see each other's objects.
- ``daemons_built``: the directory holding ``hprm-store`` and ``hprm-rti``
  for launchers (``$HPRM_BIN_DIR``, else the workspace's target directory,
  built there if missing); sets ``HPRM_BIN_DIR`` to it.
- ``eventually(predicate, timeout=5.0)``: polls until ``predicate()`` is
  true. Releases of store references are one-way messages, so what a test
  lists may lag behind what it dropped by a moment.
- ``runtime_base``: a directory of the test's own for ``XDG_RUNTIME_DIR``,
  short enough to be used: launchers and ``hprm ps``/``hprm topic`` ignore
  one longer than 44 bytes (``hprm_node::status::runtime_base``) and fall
  back to the temporary directory, where the programs of the tests running
  beside it are found too (``tmp_path`` is far longer).
"""

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# How long a daemon may take to accept connections (the machine may be busy
# building).
START_WITHIN = 30.0


def find_daemon(name):
    """The path of daemon executable `name`, or None."""
    dirs = []
    if os.environ.get("HPRM_BIN_DIR"):
        dirs.append(Path(os.environ["HPRM_BIN_DIR"]))
    dirs += [ROOT / "target" / "release", ROOT / "target" / "debug", Path(sys.prefix) / "bin"]
    for d in dirs:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return d / name
    found = shutil.which(name)
    return Path(found) if found else None


@pytest.fixture(scope="session")
def store_bin():
    path = find_daemon("hprm-store")
    if path is None:
        pytest.fail(
            "hprm-store not found in $HPRM_BIN_DIR, target/release, target/debug, the venv or PATH; "
            "build it with `cargo build --release -p hprm-store -p hprm-rti` at the repository root"
        )
    return path


class Store:
    """A running hprm-store, killed and reaped by `stop`."""

    def __init__(self, binary, directory, memory="256M", extra_args=()):
        self.dir = Path(directory)
        self.socket = str(self.dir / "store.sock")
        self._log_path = self.dir / "daemon.log"
        self._log = open(self._log_path, "wb")
        self.process = subprocess.Popen(
            [str(binary), "--socket", self.socket, "--memory", memory, *extra_args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self._wait_ready()

    def _wait_ready(self):
        deadline = time.monotonic() + START_WITHIN
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"hprm-store exited during start ({self.process.returncode}):\n{self.log()}")
            # A bare connect is enough to know the socket is served (the
            # daemon hands the connection the arena, and this one closes).
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                try:
                    s.connect(self.socket)
                    return
                except OSError:
                    pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"hprm-store did not accept connections within {START_WITHIN} s:\n{self.log()}")

    def log(self):
        """Everything the daemon logged so far."""
        try:
            return self._log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._log.close()


@pytest.fixture
def store(store_bin, tmp_path):
    s = Store(store_bin, tmp_path)
    try:
        yield s
    finally:
        s.stop()


def _eventually(predicate, timeout=5.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout} s")
        time.sleep(0.01)


@pytest.fixture
def eventually():
    return _eventually


@pytest.fixture
def runtime_base():
    import tempfile

    d = tempfile.mkdtemp(prefix="hprm-t-", dir="/tmp")
    # Its runtime directories (and their sockets) go under it: a path
    # within the 44 bytes a runtime base may have.
    assert len(d) <= 44, d
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def daemons_built():
    """hprm-store and hprm-rti for the launcher: $HPRM_BIN_DIR, else the
    workspace's target directory (built there if missing)."""
    if os.environ.get("HPRM_BIN_DIR"):
        return Path(os.environ["HPRM_BIN_DIR"])
    for profile in ("release", "debug"):
        d = ROOT / "target" / profile
        if (d / "hprm-store").exists() and (d / "hprm-rti").exists():
            os.environ["HPRM_BIN_DIR"] = str(d)
            return d
    subprocess.run(["cargo", "build", "--release", "-p", "hprm-store", "-p", "hprm-rti"], cwd=ROOT, check=True)
    os.environ["HPRM_BIN_DIR"] = str(ROOT / "target" / "release")
    return ROOT / "target" / "release"


@pytest.fixture(scope="session")
def hprm_cli(daemons_built):
    """The `hprm` CLI binary: next to the daemons, else built there."""
    exe = Path(daemons_built) / "hprm"
    if not exe.exists():
        release = ["--release"] if Path(daemons_built).name == "release" else []
        subprocess.run(["cargo", "build", *release, "-p", "hprm-cli"], cwd=ROOT, check=True)
    return exe

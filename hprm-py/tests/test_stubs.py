"""The type stubs (hprm/_native.pyi) match the built extension, and the
package type-checks as its users would see it (py.typed)."""

import subprocess
import sys

import pytest

mypy = pytest.importorskip("mypy", reason="mypy is installed by hprm-py/install.sh; run it to get the stub checks")


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_the_stubs_match_the_native_module(tmp_path):
    # From elsewhere than the source tree: check the installed package.
    r = run("mypy.stubtest", "hprm._native", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_user_program_type_checks_against_the_package(tmp_path):
    prog = tmp_path / "user.py"
    prog.write_text(
        "import hprm\n"
        "from hprm._native import Codec\n"
        "c = Codec(threshold=1024)\n"
        "n: int = c.threshold\n"
        "data: bytes = c.encode({'x': 1})\n"
        "p = hprm.Program('p', coordination='decentralized', stp='5ms')\n"
        "m: dict = p.manifest()\n"
        "wrong: str = c.threshold\n"
    )
    r = run("mypy", "--no-incremental", str(prog), cwd=tmp_path)
    # Exactly the one deliberate mistake is found: the stubs are used.
    assert 'user.py:8: error: Incompatible types in assignment (expression has type "int", variable has type "str")' in r.stdout, r.stdout + r.stderr
    assert r.stdout.count("error:") == 1, r.stdout

"""Replays the fuzz corpus of the extension's payload reader
(hprm-py/fuzz/corpus/py_payload/, what the cargo-fuzz target
hprm-py/fuzz/fuzz_targets/py_payload.rs found, minimized) and the inputs that
once broke it (hprm-py/fuzz/regressions/py_payload/) through
``Codec.decode``, in a fresh interpreter set up as the fuzz target's
(hprm-py/fuzz/sandbox.py: no pickle may name a class). Every input must
decode or raise an exception: a crash of the interpreter or a Rust panic
(pyo3's PanicException, not an Exception) fails the test."""

import subprocess
import sys
from pathlib import Path

FUZZ = Path(__file__).resolve().parent.parent / "fuzz"

REPLAY = """
import sys
from pathlib import Path
exec(compile(Path(sys.argv[1]).read_text(), sys.argv[1], "exec"))
from hprm import _native
codec = _native.Codec()
count = 0
for folder in sys.argv[2:]:
    for path in sorted(Path(folder).glob("*")):
        print(path, flush=True)
        try:
            repr(codec.decode(path.read_bytes()))
        except Exception:
            pass
        count += 1
print("decoded", count)
"""


def test_every_committed_fuzz_input_is_decoded_or_refused():
    corpus = FUZZ / "corpus" / "py_payload"
    assert any(corpus.iterdir()), f"no committed corpus in {corpus}"
    folders = [corpus] + [d for d in [FUZZ / "regressions" / "py_payload"] if d.is_dir()]
    r = subprocess.run(
        [sys.executable, "-c", REPLAY, str(FUZZ / "sandbox.py"), *map(str, folders)],
        capture_output=True, text=True, timeout=300,
    )
    last = r.stdout.strip().splitlines()[-1:] or ["(nothing)"]
    assert r.returncode == 0, f"the reader failed on the input after {last[0]}:\n{r.stderr[-3000:]}"
    assert last[0].startswith("decoded "), r.stdout[-500:]

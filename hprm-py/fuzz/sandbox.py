"""The Python side of a process that decodes fuzzed payloads: the cargo-fuzz
target (fuzz_targets/py_payload.rs) and the corpus replay
(hprm-py/tests/test_fuzz_corpus.py) run this before the first decode.

- ``pickle.loads`` refuses every class and function: unpickling calls what
  the pickle names (the codec's docs: connect only federates you trust), and
  random bytes must not call anything. The reader's own checks of a pickled
  value (ext 3: ``[bin, [buffers]]``, each buffer a descriptor) still run.
- torch and pyarrow are not imported, as where they are not installed (a
  tensor, ext 6, comes back as its numpy array; an Arrow stream, ext 5, is an
  ImportError): their own parsers are not what is fuzzed here.
"""

import io
import pickle
import sys


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"fuzzing: the pickle names {module}.{name}, which is not looked up")


def _loads(data, /, *, buffers=()):
    return _NoGlobals(io.BytesIO(data), buffers=buffers).load()


pickle.loads = _loads
sys.modules["torch"] = None
sys.modules["pyarrow"] = None

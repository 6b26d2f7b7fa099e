"""The Python examples of the README, the book (docs/src) and the package's
own README compile, and every `hprm.NAME` they use exists: an example that
drifts from the API fails here, not in a reader's hands."""

import ast
import re
from pathlib import Path

import pytest

import hprm

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "hprm-py" / "README.md", *sorted((ROOT / "docs" / "src").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def examples():
    for page in PAGES:
        for k, m in enumerate(BLOCK.finditer(page.read_text())):
            yield pytest.param(m.group(1), id=f"{page.relative_to(ROOT)}#{k}")


def test_the_docs_have_python_examples():
    assert len(list(examples())) >= 3


@pytest.mark.parametrize("code", list(examples()))
def test_a_python_example_compiles_and_names_only_what_hprm_has(code):
    tree = ast.parse(code)
    compile(tree, "<example>", "exec")
    used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "hprm"}
    missing = sorted(name for name in used if not hasattr(hprm, name))
    assert not missing, f"the example uses hprm.{', hprm.'.join(missing)}, which the package lacks"

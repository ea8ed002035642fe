"""symjac/run/, the execution services: a layer below every stage that uses them.

check/ (the isolated guarded call), verifiers/ (the sweep), frameworks/ (conform) and cli/
import run/; run/ imports none of them back, so it can never close an import circle.
Read from the source with ``ast``, as tests/test_layout.py reads the package.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

RUN = pathlib.Path(__file__).resolve().parent.parent / "symjac" / "run"
#: What run/ may import of symjac: the error hierarchy, and its own modules.
ALLOWED = ("symjac._errors", "symjac.run")


def _symjac_imports(source: str) -> set[str]:
    """The symjac modules ``source`` (a module of symjac/run/) imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            found.add("symjac.run" + (f".{node.module}" if node.module else ""))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("symjac"):
            found.add(str(node.module))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("symjac"))
    return found


@pytest.mark.parametrize("path", sorted(RUN.glob("*.py")), ids=lambda p: p.name)
def test_run_imports_only_the_errors_and_itself(path):
    outside = sorted(m for m in _symjac_imports(path.read_text(encoding="utf-8")) if not m.startswith(ALLOWED))
    assert not outside, f"symjac/run/{path.name} imports {outside}: run/ sits below the stages that use it"


def test_the_import_reader_sees_a_stage():
    # the reader itself: a verifier imported inside a function is an import
    source = "import numpy\nfrom . import _load\ndef f():\n    from symjac.verifiers.pool._verify import verify\n"
    assert _symjac_imports(source) == {"symjac.run", "symjac.verifiers.pool._verify"}

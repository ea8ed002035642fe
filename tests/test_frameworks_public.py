"""(issue 33 item 7a) An adapter package's dir() shows its documented names, not what it imports for
itself (np, sys, inspect, Any, its private submodules). The documented names are read from
docs/frameworks.md (``sjt.max_pool2d``, ``symjac.frameworks.jax.wrap``, ...) and the adapter
protocol listed there, not from the code under test."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOC = (Path(__file__).resolve().parent.parent / "docs" / "frameworks.md").read_text()
# every adapter module defines these (docs/frameworks.md, "Configurations, limitations, known defects"; check)
PROTOCOL = {"wrap", "check"}
INTERNALS = {"np", "sys", "inspect", "Any", "Callable", "annotations", "dataclasses", "Impl", "Config", "require"}


def _documented(framework: str) -> set[str]:
    names = set(re.findall(rf"frameworks\.{framework}\.([A-Za-z]\w*)", DOC))
    aliases = {alias for fw, alias in re.findall(r"import symjac\.frameworks\.(\w+) as (\w+)", DOC) if fw == framework}
    for alias in aliases:
        names |= set(re.findall(rf"\b{alias}\.([A-Za-z]\w*)", DOC))
    return names


# "Every adapter module also has": the bullets of that list (conform's adapters; keras is check's only)
SECTION = DOC.split("Every adapter module also has", 1)[1].split("```", 1)[0]
CONFORM_PROTOCOL = set(re.findall(r"^- `(\w+)", SECTION, flags=re.M))


@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow", "keras"])
def test_dir_of_an_adapter_is_its_public_names(framework):
    module = importlib.import_module(f"symjac.frameworks.{framework}")
    listed = dir(module)
    assert not [n for n in listed if n.startswith("_") or n in INTERNALS], listed
    assert PROTOCOL <= set(listed)
    assert sorted(module.__all__) == listed
    assert framework == "keras" or CONFORM_PROTOCOL <= set(listed), CONFORM_PROTOCOL - set(listed)
    missing = _documented(framework) - set(listed)
    assert not missing, f"documented in docs/frameworks.md but not in dir(): {missing}"
    for name in listed:
        getattr(module, name)  # each listed name resolves

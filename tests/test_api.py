"""The public surface: names in ``symjac.__all__`` and the package layout (private stage modules)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import types

import symjac

PUBLIC_MODULES = {"symjac.testing", "symjac.frameworks"}


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(symjac.__path__, "symjac.") if m.name != "symjac.__main__")


def test_every_public_name_resolves_and_is_not_a_module():
    for name in symjac.__all__:
        value = getattr(symjac, name)
        if f"symjac.{name}" in PUBLIC_MODULES:
            assert isinstance(value, types.ModuleType), name
        else:
            assert not isinstance(value, types.ModuleType), (name, value)


def test_public_functions_are_functions_after_every_module_is_imported():
    # Import every module first (as the CLI or a debugger would): no import path may
    # shadow a public function, so symjac.verify stays the function.
    for name in _modules():
        importlib.import_module(name)
    for name in symjac.__all__:
        value = getattr(symjac, name)
        if f"symjac.{name}" not in PUBLIC_MODULES:
            assert inspect.isfunction(value) or inspect.isclass(value) or isinstance(value, str), (name, value)


def test_no_module_path_equals_a_public_name():
    # Every module path's last part is private (_x) or a package/public module whose name is no public
    # function; but a stage's folder below the top level may carry its stage's name (frameworks/conform/):
    # only a direct child of symjac could shadow a public function (importing symjac.x binds symjac.x).
    public = set(symjac.__all__)
    for name in _modules():
        last = name.rsplit(".", 1)[-1]
        module = importlib.import_module(name)
        nested_folder = name.count(".") >= 2 and hasattr(module, "__path__")
        assert name in PUBLIC_MODULES or last.startswith("_") or last not in public or nested_folder, name
        assert isinstance(module, types.ModuleType)


def test_dir_lists_only_the_public_api():
    assert dir(symjac) == sorted(symjac.__all__)


def test_import_is_light():
    # import symjac loads neither SymPy nor NumPy (the pytest plugin is loaded by every pytest run).
    code = "import sys, symjac; print(sorted(m for m in ('sympy', 'numpy', 'networkx') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_quickstart_lists_every_finding_category():
    from pathlib import Path

    from symjac.check._report import CATEGORIES

    text = (Path(__file__).parent.parent / "docs" / "quickstart.md").read_text()
    listed = text[text.index("Finding categories:"):]
    assert [c for c in CATEGORIES if f"`{c}`" not in listed] == []

"""The package's layout: no import circles (deferred imports included), the command line
imported by nobody but its entry points, no string dispatch on an operator's name outside
its definition, and no oversized module.

Read from the source with ``ast`` (nothing is imported), so a rule breaks here the moment
a change breaks it. An import under ``if TYPE_CHECKING:`` is no run-time tie and does not
count; an import inside a function does (it runs when the function does).
"""

from __future__ import annotations

import ast
import pathlib

import networkx as nx
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "symjac"

#: Modules that may name an operator: its definition, and the framework adapters' mapping
#: of their framework's documented arguments onto specs.
DEFINITIONS = ("symjac.pool._ops.", "symjac.loss._kinds.")
ADAPTERS = ("symjac.frameworks.torch", "symjac.frameworks.jax", "symjac.frameworks.tensorflow",
            "symjac.frameworks.keras", "symjac.frameworks.onnxruntime")
#: The stages the issue names as consumers of the operator protocol.
CONSUMERS = ("symjac.verifiers", "symjac.io", "symjac.check", "symjac.cli")
MAX_LINES = 500


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(name: str, tree: ast.AST) -> set[str]:
    """The symjac modules ``name`` imports at run time (module level or inside functions)."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:  # ``from pkg import sub`` imports the submodule
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in MODULES and m != name}


def _graph() -> nx.DiGraph:
    graph = nx.DiGraph()
    for name, path in MODULES.items():
        graph.add_node(name)
        for target in _imports(name, ast.parse(path.read_text(encoding="utf-8"))):
            # a package's __init__ runs first when any of its modules is imported, but the
            # lazy top-level symjac/__init__ imports nothing at import time: edges to
            # packages count only when the package itself is named
            graph.add_edge(name, target)
    return graph


def test_the_import_graph_sees_deferred_imports() -> None:
    # the checker itself: a function-level import is an edge, a TYPE_CHECKING one is not
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from symjac import _exact\n"
                     "def f():\n    from symjac.pool import _geometry\n")
    assert _imports("symjac.testing", tree) == {"symjac.pool._geometry"}


def test_no_import_circles() -> None:
    graph = _graph()
    circles = [c for c in nx.simple_cycles(graph) if len(c) > 1]
    shown = sorted(" -> ".join(c + [c[0]]) for c in circles)[:20]
    assert not circles, f"{len(circles)} import circles, e.g.:\n" + "\n".join(shown)


def test_only_the_entry_points_import_the_command_line() -> None:
    graph = _graph()
    outside = sorted((a, b) for a, b in graph.edges
                     if b.startswith("symjac.cli") and not a.startswith("symjac.cli") and a != "symjac.__main__")
    assert not outside, f"modules outside symjac/cli import it: {outside}"


_NAMES = {"mode", "kind"}


def _names_operator(node: ast.expr) -> bool:
    """``mode``, ``kind``, ``x.mode``, ``x.kind`` (not a NumPy ``dtype.kind``)."""
    if isinstance(node, ast.Name):
        return node.id in _NAMES
    if isinstance(node, ast.Attribute) and node.attr in _NAMES:
        owner = node.value
        return not ((isinstance(owner, ast.Attribute) and owner.attr == "dtype")
                    or (isinstance(owner, ast.Name) and owner.id in ("dtype", "dt")))
    return False


def _strings(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
    return False


def _dispatch(tree: ast.AST) -> list[int]:
    """Lines comparing an operator's name with string constants (``mode == "lp"``, ``kind in (...)``)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_operator(s) for s in sides) and any(_strings(s) for s in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
            if _strings(node.pattern.value):
                lines.append(node.pattern.lineno)
    return lines


def test_the_dispatch_finder_finds_what_it_must() -> None:
    tree = ast.parse("a = spec.mode == 'lp'\nb = kind in ('mse', 'mae')\nc = x.dtype.kind == 'f'\nd = mode is None\n")
    assert _dispatch(tree) == [1, 2]


@pytest.mark.parametrize("scope", ["consumers", "everywhere"])
def test_no_string_dispatch_on_an_operator_outside_its_definition(scope: str) -> None:
    found = {}
    for name, path in MODULES.items():
        if name.startswith(DEFINITIONS) or name.startswith(ADAPTERS):
            continue
        if scope == "consumers" and not name.startswith(CONSUMERS):
            continue
        lines = _dispatch(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[name] = lines
    assert not found, f"{sum(map(len, found.values()))} string comparisons of mode/kind: {found}"


def test_no_module_over_the_size_limit() -> None:
    big = {name: n for name, path in MODULES.items()
           if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"

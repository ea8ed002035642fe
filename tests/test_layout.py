"""The package's layout: a stack whose imports all point down, no import circles, the command
line imported by nobody but its entry points, no string dispatch on an operator's name outside
its definition, folders that name their stage, and no oversized module or function.

Read from the source with ``ast`` (nothing is imported), so a rule breaks here the moment a
change breaks it. Every import counts for the stack: at module level, deferred inside a
function, and under ``if TYPE_CHECKING:`` (a type is a dependency too), counted as
``../shared/tools/package_cycles.py`` counts them. For circles between files, a run-time import
(module level or deferred) may close none; a ``TYPE_CHECKING`` import may close one only
between files of one sub-package.
"""

from __future__ import annotations

import ast
import functools
import collections
import pathlib
import re

import networkx as nx
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "symjac"
CONTRIBUTING = ROOT.parent / "CONTRIBUTING.md"

#: The stack, from the bottom up: a room (a sub-package of symjac, or "base" for the top-level
#: private modules symjac/_*.py) may import only its own modules and the rooms of lower layers.
#: Rooms of one layer are siblings that import neither each other. CONTRIBUTING.md's "The stack"
#: table lists the same layers in the same order (test_the_stack_is_the_documented_one).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("base",),
    ("run",),
    ("check",),
    ("pool", "loss"),
    ("verifiers",),
    ("io",),
    ("frameworks",),
    ("testing",),
    ("cli", "_pytest_plugin"),
)
LAYER = {room: level for level, rooms in enumerate(LAYERS) for room in rooms}

#: Modules that may name an operator: its definition, and the framework adapters' mapping
#: of their framework's documented arguments onto specs.
DEFINITIONS = ("symjac.pool._ops.", "symjac.loss._kinds.")
ADAPTERS = ("symjac.frameworks.torch", "symjac.frameworks.jax", "symjac.frameworks.tensorflow",
            "symjac.frameworks.keras", "symjac.frameworks.onnxruntime")
#: The stages the issue names as consumers of the operator protocol.
CONSUMERS = ("symjac.verifiers", "symjac.io", "symjac.check", "symjac.cli")
MAX_LINES = 500
MAX_FUNCTION_LINES = 100


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def room(module: str) -> str:
    """The sub-package a module belongs to, as ``package_cycles.py`` names it."""
    parts = module.split(".")
    if len(parts) == 1:
        return "symjac"
    if parts[1] == "__main__":  # ``python -m symjac`` is the command line's door
        return "cli"
    return "base" if parts[1].startswith("_") and parts[1] != "_pytest_plugin" else parts[1]


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(name: str, tree: ast.AST) -> dict[str, str]:
    """The symjac modules ``name`` imports, each with how: ``"run"`` (module level or deferred in a
    function: it runs when the function does) or ``"type"`` (only under ``if TYPE_CHECKING:``)."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, str] = {}

    def add(module: str, how: str) -> None:
        if found.get(module) != "run":
            found[module] = how

    def visit(node: ast.AST, how: str) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, "type")
            for child in node.orelse:
                visit(child, how)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, how)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            for a in node.names:  # ``from pkg import sub`` imports the submodule
                add(f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base, how)
        for child in ast.iter_child_nodes(node):
            visit(child, how)

    visit(tree, "run")
    out: dict[str, str] = {}
    for module, how in found.items():
        # importing a.b.c runs a.b's __init__ first: from outside a.b, that is an import of it too
        # (the root symjac's __init__ is lazy: it imports nothing at import time)
        parts = module.split(".")
        for k in range(2, len(parts) + 1):
            target = ".".join(parts[:k])
            if target in MODULES and target != name and (k == len(parts) or not name.startswith(target + ".")):
                if out.get(target) != "run":
                    out[target] = how
    return out


@functools.cache
def _graph() -> nx.DiGraph:
    """The import graph of symjac's modules: built when a test first asks (not at collection)."""
    graph = nx.DiGraph()
    for name, path in MODULES.items():
        graph.add_node(name)
        for target, how in _imports(name, ast.parse(path.read_text(encoding="utf-8"))).items():
            graph.add_edge(name, target, how=how)
    return graph


def test_the_import_graph_sees_deferred_and_type_imports() -> None:
    # the checker itself: a function-level import runs, a TYPE_CHECKING one is a type only, and
    # importing a module of a sub-package imports the sub-package's __init__ too
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from symjac import _exact\n"
                     "def f():\n    from symjac.frameworks.native import _wire\n")
    assert _imports("symjac.testing", tree) == {"symjac._exact": "type", "symjac.frameworks": "run",
                                                "symjac.frameworks.native": "run",
                                                "symjac.frameworks.native._wire": "run"}
    assert room("symjac._exact") == "base" and room("symjac.frameworks.native._wire") == "frameworks"
    assert room("symjac.__main__") == "cli" and room("symjac._pytest_plugin") == "_pytest_plugin"


def test_every_room_has_a_layer() -> None:
    rooms = {room(m) for m in MODULES} - {"symjac"}
    assert rooms == set(LAYER), f"rooms without a layer: {rooms - set(LAYER)}; layers without a room: " \
                                f"{set(LAYER) - rooms}"


def test_every_import_points_down_the_stack() -> None:
    up = collections.defaultdict(list)
    for a, b, how in _graph().edges(data="how"):
        ra, rb = room(a), room(b)
        if rb == "symjac":  # the public face imports from everything; nothing inside imports it
            up[(ra, "symjac (the root package)")].append(f"{a} -> {b}")
        elif ra != rb and ra != "symjac" and LAYER[rb] >= LAYER[ra]:
            up[(ra, rb)].append(f"{a} -> {b}" + (" (TYPE_CHECKING)" if how == "type" else ""))
    shown = [f"{ra} imports {rb}: {', '.join(sorted(v)[:4])}" for (ra, rb), v in sorted(up.items())]
    assert not up, "imports that do not point down the stack:\n" + "\n".join(shown)


def test_no_import_circles() -> None:
    run_time = nx.DiGraph([(a, b) for a, b, how in _graph().edges(data="how") if how == "run"])
    circles = [c for c in nx.simple_cycles(run_time) if len(c) > 1]
    shown = sorted(" -> ".join(c + [c[0]]) for c in circles)[:20]
    assert not circles, f"{len(circles)} run-time import circles (deferred imports counted), e.g.:\n" + "\n".join(shown)
    across = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len({room(m) for m in c}) > 1]
    assert not across, f"TYPE_CHECKING imports tie files of different sub-packages: {across}"


def test_the_stack_is_the_documented_one() -> None:
    # CONTRIBUTING.md's "## The stack" table: one row a layer, top first, rooms in backticks
    text = CONTRIBUTING.read_text(encoding="utf-8")
    section = text.split("## The stack", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if re.match(r"\|\s*\d+\s*\|", line)]
    documented = [tuple(re.findall(r"`([^`/]+)/?`", row.split("|")[2])) for row in rows]
    assert tuple(reversed(documented)) == LAYERS


def test_only_the_entry_points_import_the_command_line() -> None:
    outside = sorted((a, b) for a, b in _graph().edges
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


def _long_functions(tree: ast.AST) -> dict[str, int]:
    """Functions (methods and nested ones too) longer than the limit, from ``def`` to their last line."""
    return {node.name: n for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES}  # type: ignore[operator]


def test_the_function_counter_counts_docstrings_and_nested_functions() -> None:
    body = "\n".join(["    x = 1"] * (MAX_FUNCTION_LINES - 1))  # with its def line: just at the limit
    assert not _long_functions(ast.parse(f"def f():\n{body}\n"))
    assert _long_functions(ast.parse(f"def f():\n    '''doc'''\n{body}\n")) == {"f": MAX_FUNCTION_LINES + 1}
    nested = body.replace("\n", "\n    ")
    method = f"class A:\n    def g(self):\n        '''doc'''\n    {nested}\n"
    assert _long_functions(ast.parse(method)) == {"g": MAX_FUNCTION_LINES + 1}


def test_no_function_over_the_size_limit() -> None:
    long = {f"{name}.{fn}": n for name, path in MODULES.items()
            for fn, n in _long_functions(ast.parse(path.read_text(encoding="utf-8"))).items()}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def _first_word(module: str) -> str:
    return module.lstrip("_").split("_")[0]


def test_folders_name_their_stage() -> None:
    # a module name that repeats its folder's name, or three modules of one folder sharing a first
    # word, is a folder waiting to be made (verifiers/_pool_*.py became verifiers/pool/)
    repeats, groups = [], collections.defaultdict(list)
    for path in ROOT.rglob("*.py"):
        if path.name == "__init__.py":
            continue
        stem, folder = path.stem, path.parent.name.lstrip("_")
        if stem.lstrip("_") == folder or stem.lstrip("_").startswith(folder + "_"):
            repeats.append(str(path.relative_to(ROOT.parent)))
        groups[(path.parent, _first_word(stem))].append(stem)
    crowded = {f"{folder.relative_to(ROOT.parent)}: {word}": sorted(stems)
               for (folder, word), stems in groups.items() if len(stems) >= 3}
    assert not repeats, f"modules repeating their folder's name: {sorted(repeats)}"
    assert not crowded, f"modules sharing a prefix in one folder: {crowded}"

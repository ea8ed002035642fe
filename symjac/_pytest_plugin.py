"""pytest plugin: parametrise tests over symjac spec files.

Registered through the ``pytest11`` entry point. Loading it imports no SymPy and
no NumPy; spec files are read only when a test asks for them::

    import pytest

    @pytest.mark.symjac_spec("specs/seeds/*.toml")
    def test_my_pool(symjac_spec):          # one test per case of every file
        case = symjac_spec                  # a symjac.specfile.Case
        ...

Paths and globs are relative to the test file's folder, else to pytest's rootdir.
``--symjac-dtype`` sets the ``symjac_dtype`` fixture (default float64).
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pytest

MARKER = "symjac_spec"
FIXTURE = "symjac_spec"
DTYPE_OPTION = "--symjac-dtype"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("symjac", "symjac exact-gradient checks")
    group.addoption(DTYPE_OPTION, default="float64", choices=("float16", "float32", "float64"),
                    help="dtype the symjac_dtype fixture gives (default float64)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", f"{MARKER}(*paths): run the test once per case of these symjac spec files "
                                       "(globs allowed), passing the case as the symjac_spec fixture")


def _spec_paths(metafunc: Any, patterns: tuple[str, ...]) -> list[Path]:
    here = Path(str(metafunc.definition.fspath)).parent
    root = Path(str(metafunc.config.rootpath))
    paths: list[Path] = []
    for pattern in patterns:
        for base in (here, root):
            found = sorted(glob.glob(str(base / pattern), recursive=True))
            if found:
                paths.extend(Path(p) for p in found)
                break
        else:
            raise pytest.UsageError(f"@pytest.mark.{MARKER}({pattern!r}): no spec file matches "
                                    f"(looked in {here} and {root})")
    return paths


def pytest_generate_tests(metafunc: Any) -> None:
    if FIXTURE not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or not marker.args:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} uses the {FIXTURE} fixture: "
                                f"mark it @pytest.mark.{MARKER}('path/or/*.toml')")
    from symjac.io._specfile import load  # lazy: only when a test asks for spec files

    cases, ids = [], []
    for path in _spec_paths(metafunc, tuple(marker.args)):
        for case in load(path).cases:
            cases.append(case)
            ids.append(f"{path.stem}:{case.name}" if len(load(path).cases) > 1 else path.stem)
    metafunc.parametrize(FIXTURE, cases, ids=ids)


@pytest.fixture
def symjac_dtype(request: Any) -> str:
    """The dtype chosen with --symjac-dtype."""
    return str(request.config.getoption(DTYPE_OPTION))

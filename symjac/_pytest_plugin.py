"""pytest plugin: parametrise tests over symjac spec files.

Registered through the ``pytest11`` entry point. Loading it imports no SymPy and
no NumPy; spec files are read only when a test asks for them::

    import pytest

    @pytest.mark.symjac_spec("specs/seeds/*.toml")
    def test_my_layer(symjac_case):         # one test per case of every file, id = the case's name
        symjac_case.verify(my_impl)         # pool or loss case: raises VerificationError on a finding

``symjac_spec`` gives the raw case (``name``, ``operator``, ``inputs``, ``expect``)
instead. Paths and globs are relative to the test file's folder, else to pytest's
rootdir; a pattern matching no file is a collection error naming it.
``--symjac-dtype`` sets the ``symjac_dtype`` fixture and the dtype of
``symjac_case.verify`` (default float64).
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import Any

import pytest

MARKER = "symjac_spec"
FIXTURE = "symjac_spec"
CASE_FIXTURE = "symjac_case"
DTYPE_OPTION = "--symjac-dtype"


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("symjac", "symjac exact-gradient checks")
    group.addoption(DTYPE_OPTION, default="float64", choices=("float16", "bfloat16", "float32", "float64"),
                    help="dtype the symjac_dtype fixture gives (default float64)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", f"{MARKER}(*paths): run the test once per case of these symjac spec files "
                                       "(globs allowed), passing the case as the symjac_spec fixture")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    """Under ``-vv``, a test failing with a :class:`symjac.VerificationError` gets a section holding
    the whole report (its message is cut to one screen)."""
    outcome = yield
    if call.excinfo is None or item.config.getoption("verbose") < 2:
        return
    from symjac._errors import VerificationError

    if isinstance(call.excinfo.value, VerificationError):
        outcome.get_result().sections.append(("symjac report, every finding", call.excinfo.value.report.details()))


def _spec_paths(metafunc: Any, patterns: tuple[str, ...]) -> list[Path]:
    here = Path(str(metafunc.definition.fspath)).parent
    root = Path(str(metafunc.config.rootpath))
    paths: list[Path] = []
    for pattern in patterns:
        bases = list(dict.fromkeys((here, root)))
        for base in bases:
            found = sorted(glob.glob(str(base / pattern), recursive=True))
            if found:
                paths.extend(Path(p) for p in found)
                break
        else:
            where = " or ".join(str(b) for b in bases)
            raise pytest.Collector.CollectError(  # shown as this one line, without a traceback
                f"{metafunc.definition.nodeid}: @pytest.mark.{MARKER}({pattern!r}) matches no spec file in {where}")
    return paths


def pytest_generate_tests(metafunc: Any) -> None:
    wanted = [name for name in (FIXTURE, CASE_FIXTURE) if name in metafunc.fixturenames]
    if not wanted:
        return
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or not marker.args:
        raise pytest.Collector.CollectError(f"{metafunc.definition.nodeid} uses the {wanted[0]} fixture: "
                                            f"mark it @pytest.mark.{MARKER}('path/or/*.toml')")
    from symjac.io._specfile import load  # lazy: only when a test asks for spec files
    from symjac.testing import SpecCase

    cases = [case for path in _spec_paths(metafunc, tuple(marker.args)) for case in load(path).cases]
    dtype = str(metafunc.config.getoption(DTYPE_OPTION))
    values = [tuple(SpecCase(c, dtype) if name == CASE_FIXTURE else c for name in wanted) for c in cases]
    metafunc.parametrize(",".join(wanted), [v if len(v) > 1 else v[0] for v in values], ids=[c.name for c in cases])


@pytest.fixture
def symjac_dtype(request: Any) -> str:
    """The dtype chosen with --symjac-dtype."""
    return str(request.config.getoption(DTYPE_OPTION))

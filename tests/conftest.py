"""Fixtures, markers and options shared by the test modules.

Markers (registered in pyproject.toml):

- ``@pytest.mark.requires("ml_dtypes", ...)``: the test skips, with the reason
  ``pytest.importorskip`` gives, unless every named module imports. For tests whose
  optional package is reached inside the library (``dtype="bfloat16"`` needs
  ml_dtypes) rather than imported by the test itself.
- ``@pytest.mark.slow``: a long grid or a long test. Skipped unless ``--run-slow`` is
  given (``.ci/run`` gives it in its full-suite step), so that the README's test command
  stays short.
- The README's run also takes a **sample of each parametrized test**: its first and last
  case (``SAMPLE``; a grid usually runs from its plainest case to its hardest, or from a
  correct implementation to a planted defect), the rest deselected (pytest's summary counts them);
  ``--run-slow`` runs every case. A module or test marked ``@pytest.mark.every_case`` is
  not sampled (the docs' blocks: each is an example a reader copies). A property test draws a
  quarter of its Hypothesis examples (``tests/sampling.py``).

A worker that dies fails the run instead of being replaced (``pytest_configure``), and
a test still running after pyproject's ``faulthandler_timeout`` dumps every thread's
stack and ends its process: a hang or a crash is a red run with its cause, never a
CI that waits out its time limit.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator

import pytest

import sampling

RUN_SLOW = "--run-slow"

#: Cases of one parametrized test the run without ``--run-slow`` takes: spread over its grid.
SAMPLE = 2


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(RUN_SLOW, action="store_true", default=False,
                     help="also run the tests marked slow (long grids; .ci/run's full-suite step runs them)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # A worker that dies (a crash, the kernel's OOM killer, the per-test watchdog of
    # pyproject's faulthandler_timeout) fails the run at once, where pytest-xdist would
    # otherwise replace it, and with --dist loadfile can then wait forever for the
    # replacement's work (pytest-xdist issues #784 and #1323). An explicit
    # --max-worker-restart still wins.
    if getattr(config.option, "maxworkerrestart", "unset") is None:
        config.option.maxworkerrestart = "0"
    sampling.FULL = bool(config.getoption(RUN_SLOW))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Skip markers added here are reported at the test's own line, as a skipif would be.
    run_slow = config.getoption(RUN_SLOW)
    if not run_slow:
        outside = _outside_the_sample(items)
        config.hook.pytest_deselected(items=[item for item in items if id(item) in outside])
        items[:] = [item for item in items if id(item) not in outside]
    for item in items:
        if not run_slow and item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.skip(reason=f"slow grid: run with {RUN_SLOW}"))
        for marker in item.iter_markers("requires"):
            for module in marker.args:
                reason = _missing(module)
                if reason is not None:
                    item.add_marker(pytest.mark.skip(reason=reason))


def _outside_the_sample(items: list[pytest.Item]) -> set[int]:
    """The ``id`` of each case of a parametrized test beyond its sample: of a grid of n > SAMPLE
    cases (in collection order, those not marked slow) the run keeps SAMPLE of them spread from
    case 0 to case n-1 (both ends)."""
    grids: dict[tuple[object, ...], list[pytest.Item]] = {}
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name == item.name or item.get_closest_marker("slow") or item.get_closest_marker("every_case"):
            continue
        grids.setdefault((item.path, getattr(item, "cls", None), name), []).append(item)
    outside: set[int] = set()
    for cases in grids.values():
        n = len(cases)
        if n > SAMPLE:
            keep = {round(i * (n - 1) / (SAMPLE - 1)) for i in range(SAMPLE)}
            outside.update(id(case) for j, case in enumerate(cases) if j not in keep)
    return outside


@functools.cache
def _missing(module: str) -> str | None:
    """Why ``module`` does not import (pytest.importorskip's words), or None if it does."""
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return f"could not import {module!r}: {exc}"
    return None


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """torch on one intra-op thread while a module runs (its tests make thousands of tiny
    ops, where intra-op threads only add wake-up latency on a busy 2-core machine);
    the previous count is restored afterwards; the test skips without torch.
    Use: ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    torch = pytest.importorskip("torch")

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)

"""Regression tests for issue 11's performance cliffs: structure, not time.

Each test pins the property that keeps a case linear in its work: SymPy work per
window class independent of the window's size, Python iterations bounded by
sqrt(windows x slots), verify-path memory within c·nnz, loss precision independent
of |z|, and the finite-difference oracle's calls independent of the window size.
"""

from __future__ import annotations

import tracemalloc

import mpmath
import numpy as np
import pytest
import sympy

import symjac
from symjac.loss._evaluate import evaluate
from symjac.loss._spec import DPS
from symjac.pool import _geometry, _symbolic
from symjac.pool._geometry import resolve
from symjac.pool._symbolic import lines, window_classes


def _clear_caches() -> None:
    _geometry._resolve.cache_clear()
    _symbolic._classes.cache_clear()
    _symbolic.template.cache_clear()


def _count_diffs(monkeypatch: pytest.MonkeyPatch, spec: symjac.AdaptivePool | symjac.GlobalPool, shape: tuple[int, ...],
                 x: np.ndarray | None = None) -> tuple[int, int]:
    calls = []
    real = sympy.diff

    def counting(*args: object, **kw: object) -> object:
        calls.append(args)
        return real(*args, **kw)

    _clear_caches()
    monkeypatch.setattr(sympy, "diff", counting)
    symjac.jacobian(spec, shape if x is None else x)
    monkeypatch.setattr(sympy, "diff", real)
    return len(calls), len(window_classes(resolve(spec, shape)))


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_sympy_differentiations_do_not_grow_with_window_size(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    # adaptive 7x7 heads on 28^2 (4-cell windows) and 112^2 (16^2-cell windows): the
    # same number of SymPy diff calls, at most 2 per class (avg: d/da and the
    # symmetry check d/dr of (a + r)/D; max: d Max(a, r)/da once).
    counts = []
    for n in (28, 112):
        x = np.arange(n * n, dtype=np.float64).reshape(1, 1, n, n) if mode == "max" else None
        diffs, classes = _count_diffs(monkeypatch, symjac.AdaptivePool(mode, (7, 7)), (1, 1, n, n), x)
        assert 1 <= diffs <= 2 * classes
        counts.append(diffs)
    assert counts[0] == counts[1]
    # a global window of 96^2 = 9,216 cells costs what a 9-cell one does
    big, _ = _count_diffs(monkeypatch, symjac.GlobalPool(mode), (96, 96),
                          np.arange(96 * 96, dtype=np.float64).reshape(96, 96) if mode == "max" else None)
    small, _ = _count_diffs(monkeypatch, symjac.GlobalPool(mode), (3, 3),
                            np.arange(9, dtype=np.float64).reshape(3, 3) if mode == "max" else None)
    assert big == small


@pytest.mark.parametrize(("spec", "shape", "expected"), [
    (symjac.Pool("avg", 3, stride=1, padding="same"), (64, 64), 9),      # 9 slots across 4,096 windows
    (symjac.Pool("max", 5, stride=1, padding="same"), (40, 40), 25),
    (symjac.GlobalPool("avg"), (128, 128), 1),                           # one window across 16,384 slots
    (symjac.AdaptivePool("max", (7, 7)), (112, 112), 49),                # 49 windows of 256 slots
])
def test_python_iterations_are_min_of_windows_and_slots(spec: symjac.Pool, shape: tuple[int, int],
                                                        expected: int) -> None:
    g = resolve(spec, shape)
    found = list(lines(g))
    assert len(found) == expected == min(g.cells.shape)
    # the lines cover every valid (window, slot) pair once, and within a line no cell repeats
    assert sum(line.w.size for line in found) == int(g.valid.sum())
    assert all(np.unique(line.cells).size == line.cells.size for line in found)


def _verify_peak(spec: symjac.Pool | symjac.AdaptivePool, shape: tuple[int, ...]) -> tuple[int, int]:
    low = symjac.lower(spec, shape)
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) * 0.25
    nnz = symjac.jacobian(spec, x).nnz if spec.mode == "avg" else int(resolve(spec, shape).valid.sum())
    symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=shape, timeout=None)  # warm caches
    tracemalloc.start()
    report = symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=shape, timeout=None)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.ok, report
    return peak, nnz


@pytest.mark.parametrize(("spec", "shape"), [
    (symjac.Pool("avg", 7, stride=1, padding="same"), (1, 1, 48, 48)),
    (symjac.Pool("max", 7, stride=1, padding="same"), (1, 1, 48, 48)),
    (symjac.AdaptivePool("avg", (7, 7)), (1, 1, 112, 112)),
])
def test_verify_memory_is_linear_in_nnz(spec: symjac.Pool, shape: tuple[int, ...]) -> None:
    # Every intermediate of the verify path is (B, W, K)-sized or smaller: the traced
    # peak stays within c·nnz float64 elements (c = 32 covers the handful of row arrays
    # alive at once), never a dense (outputs x inputs) or (colours x nnz) array.
    peak, nnz = _verify_peak(spec, shape)
    assert peak <= 32 * 8 * nnz, (peak, nnz)


def test_fd_oracle_checks_directions_for_large_windows() -> None:
    # A global pool would need one forward pair per input cell for entrywise central
    # differences; with directions it needs 2 x 3, and a forward that disagrees with
    # its own backward is still caught.
    spec = symjac.GlobalPool("avg")
    shape = (1, 1, 64, 64)
    low = symjac.lower(spec, shape)
    ok = symjac.verify(spec, backward=low.vjp, forward=low.forward, input_shape=shape, timeout=None)
    assert ok.ok and ok.stats["fd_consistent"] is True
    assert ok.stats["forward_calls"] <= 8  # 1 forward check + 2 x 3 directions
    report = symjac.verify(spec, backward=low.vjp, forward=lambda x: 2 * low.forward(x), input_shape=shape,
                           timeout=None)
    assert "not_fd_consistent" in report.categories(), report


@pytest.mark.parametrize("z", [1.0, 1e4, 1e6, 1e300])
def test_sigmoid_ce_needs_no_extra_digits_at_any_magnitude(z: float) -> None:
    # d/dz of sigmoid_ce at label 1 is σ(z) - 1 = -1/(1 + e^z); at label 0 and -z it is
    # σ(-z) = 1/(1 + e^z) (mpmath, directly from the definition, 60 digits).
    loss = symjac.Loss("sigmoid_ce", reduction="sum")
    ev = evaluate(loss, [z, -z], [1.0, 0.0], values=True, derivatives=True)
    assert ev.dps == DPS  # precision does not grow with |z|
    with mpmath.workdps(60):
        expected = [-1 / (1 + mpmath.exp(mpmath.mpf(z))), 1 / (1 + mpmath.exp(mpmath.mpf(z)))]
        for got, want in zip(ev.derivative(), expected):
            assert abs(got - want) <= abs(want) * mpmath.mpf(10) ** (-40)
        # ℓ at label 1 is log(1 + e^-z); at label 0 and -z also log(1 + e^-z)
        want_value = mpmath.log1p(mpmath.exp(-mpmath.mpf(z)))
        for got in ev.elements:
            assert abs(got - want_value) <= want_value * mpmath.mpf(10) ** (-40)

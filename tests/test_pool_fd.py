"""Tests for ``symjac.verifiers.pool._fd``: the finite-difference rows, grid at once and line by line.

Expected values by definition: with a forward written here from the window table,
entry (b, w, k) is ``(f(x + h·e_c)[b, w] - f(x)[b, w]) / h`` for the cell c the slot
reads (the compressed FD moves a whole colour, but a window reads one cell of each).
"""

from __future__ import annotations

import numpy as np
import pytest

import symjac
from symjac.verifiers.pool._inputs import random_dyadic
from symjac.check._rounding import unit_roundoff
from symjac.pool._geometry import resolve
from symjac.verifiers.pool import _fd as _pool_fd


def _forward(g, mode):
    def f(x):  # canonical (B, n_in) float64 -> (B, W): each window from its own cells only
        values = np.where(g.valid, x[:, np.where(g.valid, g.cells, 0)], -np.inf if mode == "max" else 0.0)
        return values.max(axis=2) if mode == "max" else values.sum(axis=2) / g.divisor
    return f


@pytest.mark.parametrize(("spec", "shape"), [
    (symjac.Pool("max", 3, stride=1, padding=1), (2, 3, 9, 7)),
    (symjac.Pool("avg", (3, 2), stride=(2, 1), padding=1, dilation=(2, 1), ceil_mode=True), (2, 3, 9, 8)),
    (symjac.AdaptivePool("avg", (3, 4)), (1, 12, 16)),  # more slots than windows: window lines
])
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_fd_rows_are_the_definition_on_both_paths(monkeypatch, spec, shape, dtype):
    g, dt = resolve(spec, shape), np.dtype(dtype)
    f = _forward(g, spec.mode)
    x = random_dyadic(g, g.in_spatial, dt, 3)
    xc = g.to_canonical(x).astype(np.float64)
    y = f(xc)

    def forward_each(xs):
        for a in xs:
            yield g.from_canonical(f(g.to_canonical(a).astype(np.float64)), g.out_spatial)

    want = np.zeros((g.batch, g.n_out, g.cells.shape[1]))
    for w, k in zip(*np.nonzero(g.valid)):
        moved = xc.copy()
        moved[:, g.cells[w, k]] += _pool_fd.STEP
        want[:, w, k] = (f(moved)[:, w] - y[:, w]) / _pool_fd.STEP
    found = []
    for at_once in (2**15, -1):  # the whole grid at once; a line at a time
        monkeypatch.setattr(_pool_fd, "AT_ONCE", at_once)
        fd, tol = _pool_fd.finite_differences(g, forward_each, x, y, dt, unit_roundoff(dt))
        assert np.array_equal(fd, want)
        assert (tol[:, ~g.valid] == 0).all() and (tol[:, g.valid] >= 0).all()
        found.append(tol)
    assert np.array_equal(found[0], found[1])  # the same bounds, bit for bit
